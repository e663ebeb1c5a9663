#!/usr/bin/env bash
# Makes the webhook's serving certificate for the default and development overlays: a private CA
# that exists only in the admin's working directory, a serving certificate it signs for the
# webhook's Service, and the kustomize patch that puts the CA into the
# MutatingWebhookConfiguration's caBundle.
#
# Why a script run by the admin rather than a Job in the cluster: such a Job needs a service
# account allowed to write MutatingWebhookConfigurations, a standing right to intercept every
# pod in the cluster. Here no in-cluster component holds that right, the CA key never enters the
# cluster, and what gets applied can be read first (`kubectl kustomize`). For automatic rotation
# use overlays/cert-manager instead.
#
# Idempotent: an existing CA is kept; an existing serving certificate is kept while it is signed
# by the CA, names the Service and is valid for at least 30 more days. Everything new is made
# in a temporary directory and moved into place at the end, so a failure changes nothing.
set -o errexit -o nounset -o pipefail

readonly RENEW_BEFORE_DAYS=30

info() { echo "gen-webhook-cert: $*" >&2; }
die() {
  echo "gen-webhook-cert: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} [options] DIR
Writes into DIR (created with mode 0700 if absent):
  ca.crt ca.key         the private CA (keep ca.key safe; it never goes into the cluster)
  tls.crt tls.key       the webhook's serving certificate and key (-> Secret kvgpu-webhook-tls)
  ca-bundle-patch.yaml  JSON patch setting the webhook configuration's caBundle
Options:
  --namespace NS        the webhook's namespace (default: kata-vgpu)
  --service NAME        the webhook's Service (default: kvgpu-webhook)
  --days N              serving certificate lifetime in days (default: 365)
  --ca-days N           CA lifetime in days (default: 3650)
  --renew               issue a new serving certificate even if the current one is still good
  --rotate-ca           make a new CA and sign a new serving certificate with it; the old CA
                        stays in the caBundle (ca-previous.crt) so both are trusted meanwhile
  --drop-previous-ca    remove the previous CA from the caBundle (after a --rotate-ca rollout)
  -h, --help            this text
EOF
}

need_number() {
  [[ $# -ge 2 && $2 =~ ^[1-9][0-9]{0,4}$ ]] || die "$1 needs a whole number of days (1-99999)"
}

namespace=kata-vgpu
service=kvgpu-webhook
days=365
ca_days=3650
renew=0
rotate_ca=0
drop_previous=0
dir=
while [[ $# -gt 0 ]]; do
  case $1 in
  --namespace)
    [[ $# -ge 2 && -n $2 ]] || die "--namespace needs a value"
    namespace=$2
    shift
    ;;
  --service)
    [[ $# -ge 2 && -n $2 ]] || die "--service needs a value"
    service=$2
    shift
    ;;
  --days)
    need_number "$@"
    days=$2
    shift
    ;;
  --ca-days)
    need_number "$@"
    ca_days=$2
    shift
    ;;
  --renew) renew=1 ;;
  --rotate-ca) rotate_ca=1 ;;
  --drop-previous-ca) drop_previous=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  -*)
    usage >&2
    die "unknown option: $1"
    ;;
  *)
    [[ -z $dir ]] || die "only one DIR, got '$dir' and '$1'"
    dir=$1
    ;;
  esac
  shift
done

[[ -n $dir ]] || {
  usage >&2
  die "DIR is missing"
}
# DNS labels, as Kubernetes requires for Service and Namespace names.
label='^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
[[ $namespace =~ $label ]] || die "--namespace '$namespace' is not a DNS label"
[[ $service =~ $label ]] || die "--service '$service' is not a DNS label"
((rotate_ca + drop_previous < 2)) || die "--rotate-ca and --drop-previous-ca exclude each other"
((days < ca_days)) || die "--days ($days) must be shorter than --ca-days ($ca_days)"
command -v openssl >/dev/null || die "openssl not found (Debian package openssl)"
command -v base64 >/dev/null || die "base64 not found (Debian package coreutils)"

if [[ -e $dir && ! -d $dir ]]; then die "$dir exists and is not a directory"; fi
if [[ -f $dir/ca.crt && ! -f $dir/ca.key ]] || [[ ! -f $dir/ca.crt && -f $dir/ca.key ]]; then
  die "$dir has only one of ca.crt and ca.key; restore the other or remove both to start over"
fi
if [[ $rotate_ca -eq 1 && ! -f $dir/ca.crt ]]; then die "--rotate-ca: there is no CA in $dir yet"; fi
if [[ -f $dir/ca.crt ]] && ! openssl x509 -in "$dir/ca.crt" -noout 2>/dev/null; then
  die "$dir/ca.crt is not a PEM certificate"
fi

# The names the API server uses to reach the Service (it connects to <service>.<namespace>.svc),
# and those kube-scheduler uses for the scheduler extender, which serves with the same pair.
extender=kvgpu-scheduler-extender
dns_names=("$service" "$service.$namespace" "$service.$namespace.svc" "$service.$namespace.svc.cluster.local"
  "$extender.$namespace.svc" "$extender.$namespace.svc.cluster.local")

umask 077
mkdir -p "$dir"
work=$(mktemp -d "$dir/.gen.XXXXXX")
trap 'rm -rf "$work"' EXIT

new_ca() {
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$work/ca.key" -out "$work/ca.crt" -days "$ca_days" \
    -subj "/CN=kata-vgpu webhook CA $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null ||
    die "openssl could not make the CA"
}

# True when DIR's serving certificate is signed by CA, names every DNS name and lives long enough.
serving_cert_good() {
  local ca=$1 cert=$2 key=$3 san name
  [[ -f $cert && -f $key ]] || return 1
  openssl verify -CAfile "$ca" "$cert" >/dev/null 2>&1 || return 1
  openssl x509 -in "$cert" -noout -checkend $((RENEW_BEFORE_DAYS * 86400)) >/dev/null || return 1
  [[ $(openssl x509 -in "$cert" -noout -pubkey) == $(openssl pkey -in "$key" -pubout 2>/dev/null) ]] || return 1
  san=$(openssl x509 -in "$cert" -noout -ext subjectAltName 2>/dev/null) || return 1
  for name in "${dns_names[@]}"; do
    [[ $san == *"DNS:$name,"* || $san == *"DNS:$name" ]] || return 1
  done
}

new_serving_cert() {
  local ca_crt=$1 ca_key=$2 san=() name
  for name in "${dns_names[@]}"; do san+=("DNS:$name"); done
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$work/tls.key" -out "$work/tls.csr" -subj "/CN=$service.$namespace.svc" 2>/dev/null ||
    die "openssl could not make the serving key"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth" "subjectAltName=$(IFS=,; echo "${san[*]}")" >"$work/ext.cnf"
  openssl x509 -req -in "$work/tls.csr" -CA "$ca_crt" -CAkey "$ca_key" -CAcreateserial \
    -CAserial "$work/ca.srl" -days "$days" -sha256 -extfile "$work/ext.cnf" \
    -out "$work/tls.crt" 2>/dev/null || die "openssl could not sign the serving certificate"
  rm -f "$work/tls.csr" "$work/ext.cnf" "$work/ca.srl"
}

# Decide everything in $work first; only then move files into $dir.
ca_crt=$dir/ca.crt
ca_key=$dir/ca.key
previous=keep
if [[ ! -f $dir/ca.crt ]]; then
  info "new CA (valid $ca_days days)"
  new_ca
  ca_crt=$work/ca.crt
  ca_key=$work/ca.key
elif [[ $rotate_ca -eq 1 ]]; then
  info "new CA; the current one stays trusted as ca-previous.crt until --drop-previous-ca"
  cp "$dir/ca.crt" "$work/ca-previous.crt"
  new_ca
  ca_crt=$work/ca.crt
  ca_key=$work/ca.key
  previous=new
fi
if [[ $drop_previous -eq 1 ]]; then previous=drop; fi

if [[ $renew -eq 0 && $ca_crt == "$dir/ca.crt" ]] && serving_cert_good "$ca_crt" "$dir/tls.crt" "$dir/tls.key"; then
  info "serving certificate in $dir is good; kept (--renew to replace it)"
else
  info "new serving certificate for ${dns_names[2]} (valid $days days)"
  new_serving_cert "$ca_crt" "$ca_key"
fi

# The caBundle: the current CA, plus the previous one while a CA rotation rolls out.
bundle_previous=
case $previous in
new) bundle_previous=$work/ca-previous.crt ;;
keep) [[ -f $dir/ca-previous.crt ]] && bundle_previous=$dir/ca-previous.crt ;;
drop) bundle_previous= ;;
esac
bundle=$(cat "$ca_crt" ${bundle_previous:+"$bundle_previous"} | base64 -w0)
cat >"$work/ca-bundle-patch.yaml" <<EOF
# Made by deploy/gen-webhook-cert.sh: the CA that signed the webhook's serving certificate.
- op: add
  path: /webhooks/0/clientConfig/caBundle
  value: $bundle
EOF

for f in ca.crt ca.key ca-previous.crt tls.crt tls.key ca-bundle-patch.yaml; do
  if [[ -f $work/$f ]]; then mv -f "$work/$f" "$dir/$f"; fi
done
if [[ $previous == drop && -f $dir/ca-previous.crt ]]; then
  rm -f "$dir/ca-previous.crt"
  info "previous CA dropped from the caBundle"
fi
info "wrote $dir; apply with: kubectl apply -k <overlay>"
