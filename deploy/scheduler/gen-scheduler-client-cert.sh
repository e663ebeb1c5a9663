#!/usr/bin/env bash
# Makes kube-scheduler's client certificate for the scheduler extender, signed by the CA that
# deploy/gen-webhook-cert.sh keeps in DIR (the extender's --client-ca-file is that CA, shipped in
# the Secret kvgpu-webhook-tls as ca.crt), and prints the extender's tlsConfig for
# deploy/scheduler/kube-scheduler-config.yaml. The extender refuses filter, prioritize and bind
# without such a certificate, so that no other pod in the cluster can bind pods through it.
#
# The certificate says clientAuth only: it cannot serve, and the serving certificate (serverAuth)
# cannot be used as a client certificate. An existing one is kept while it is signed by the CA
# and valid for at least 30 more days.
set -o errexit -o nounset -o pipefail

info() { echo "gen-scheduler-client-cert: $*" >&2; }
die() {
  echo "gen-scheduler-client-cert: $*" >&2
  exit 1
}
usage() {
  cat <<USAGE
usage: ${0##*/} DIR
Reads DIR/ca.crt and DIR/ca.key (made by deploy/gen-webhook-cert.sh DIR); writes
DIR/scheduler-client.crt and DIR/scheduler-client.key; prints the tlsConfig for the extender.
USAGE
}

case ${1:-} in
  -h | --help)
    usage
    exit 0
    ;;
  "" | -*)
    usage >&2
    exit 2
    ;;
esac
dir=$1
[[ -f $dir/ca.crt && -f $dir/ca.key ]] || die "$dir has no ca.crt and ca.key: run deploy/gen-webhook-cert.sh $dir first"
crt=$dir/scheduler-client.crt
key=$dir/scheduler-client.key

if [[ -f $crt && -f $key ]] && openssl verify -CAfile "$dir/ca.crt" "$crt" >/dev/null 2>&1 &&
  openssl x509 -in "$crt" -noout -checkend $((30 * 24 * 3600)) >/dev/null; then
  info "keeping $crt"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$work/client.key" -out "$work/client.csr" -subj "/CN=kube-scheduler" 2>/dev/null ||
    die "openssl could not make the client key"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=clientAuth" >"$work/ext.cnf"
  openssl x509 -req -in "$work/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -CAserial "$work/ca.srl" -days 365 -sha256 -extfile "$work/ext.cnf" \
    -out "$work/client.crt" 2>/dev/null || die "openssl could not sign the client certificate"
  install -m 0600 "$work/client.key" "$key"
  install -m 0644 "$work/client.crt" "$crt"
  info "wrote $crt (valid 365 days)"
fi

cat <<TLS
  tlsConfig:
    caData: $(base64 -w0 <"$dir/ca.crt")
    certData: $(base64 -w0 <"$crt")
    keyData: $(base64 -w0 <"$key")
TLS
