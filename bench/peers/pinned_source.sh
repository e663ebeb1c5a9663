# Sourced by the bench/peers scripts that build a peer from a git tag: `pinned_source NAME GIT TAG
# COMMIT` prints the path of the peer's source tree at COMMIT, fetched once into
# $cache/peers/src/NAME-COMMIT (never into the clone) and reused while the commit is the same. It
# stops (the caller's `die`) unless TAG at GIT is exactly COMMIT: a moved tag builds nothing.
# The caller defines `cache`, `info` and `die`.
# shellcheck shell=bash disable=SC2154
pinned_source() {
  local name=$1 git=$2 tag=$3 commit=$4 src tmp got
  src=$cache/peers/src/$name-$commit
  if [[ ! -f $src/go.mod ]]; then
    mkdir -p "$cache/peers/src"
    tmp=$(mktemp -d "$cache/peers/src/.fetch.XXXXXX")
    info "fetching $name $tag from $git"
    git init -q --bare "$tmp/git"
    git -C "$tmp/git" fetch -q --depth 1 "$git" "refs/tags/$tag:refs/tags/$tag" ||
      { rm -rf "$tmp"; die "cannot fetch $name $tag from $git (set the variable for its source: see the script's top)"; }
    got=$(git -C "$tmp/git" rev-parse "$tag^{commit}")
    [[ $got == "$commit" ]] || { rm -rf "$tmp"; die "$name $tag at $git is $got, not the pinned $commit"; }
    mkdir "$tmp/tree"
    git -C "$tmp/git" archive "$commit" | tar -x -C "$tmp/tree"
    mv "$tmp/tree" "$src"
    rm -rf "$tmp"
  fi
  echo "$src"
}
