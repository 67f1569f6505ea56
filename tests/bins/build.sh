#!/usr/bin/env bash
# Builds the control-plane binaries the tests and `make run` use, from Go modules, once, into a
# cache outside the repository keyed by version. Prints the binary directory on stdout.
#
#   build.sh            build what is missing (etcd, kube-apiserver + kubectl, gardener-apiserver)
#   build.sh update     regenerate the staging replace lines for $K8S_VERSION (then commit)
#
# KIM_TESTENV_BIN_DIR or KUBEBUILDER_ASSETS pointing at existing binaries skips the build of
# the Kubernetes binaries (gardener-apiserver is still built into the cache when missing there).
#
# Go's build and module caches for these builds live in a temporary directory that is removed
# afterwards (they take 5-7 GB and are useless once the binaries exist). KIM_TESTENV_GO_CACHES=keep
# uses Go's usual caches instead ($GOCACHE, $GOMODCACHE), for people who rebuild often.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# Pinned versions, shared with the Rust harness (kim_tests::testenv::bins). Environment
# variables override them.
eval "$(sed -n 's/^\([A-Z0-9_]*_VERSION\)=\(.*\)$/\1=${\1:-\2}/p' "$HERE/versions.env")"
STAGING="v0.${K8S_VERSION#v1.}"
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/kim-testenv
BIN=$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-gardener-$GARDENER_VERSION
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { echo "kim-testenv: $*" >&2; }

update() {
  local mod
  mod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  cd "$HERE/apiserver"
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$mod"); do
    go mod edit -replace="$m=$m@$STAGING"
  done
  go mod tidy
  cd "$HERE/etcd" && go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy
  cd "$HERE/gardener" && go mod edit -require="github.com/gardener/gardener@$GARDENER_VERSION" \
    -replace="github.com/gardener/gardener/pkg/apis=github.com/gardener/gardener/pkg/apis@$GARDENER_VERSION" && go mod tidy
}

GO_TMP=
# Points Go's caches at one temporary directory, removed when the script exits.
temporary_go_caches() {
  [ -z "$GO_TMP" ] && [ "${KIM_TESTENV_GO_CACHES:-}" != keep ] || return 0
  GO_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kim-testenv-go.XXXXXX")
  trap 'rm -rf "$GO_TMP"' EXIT
  # -modcacherw: module files are writable, so the directory can be removed with rm.
  export GOCACHE=$GO_TMP/build GOMODCACHE=$GO_TMP/mod GOFLAGS="$GOFLAGS -modcacherw"
}

# build_one NAME MODULE_DIR [go build flags...]: builds $BIN/NAME unless it is there.
build_one() {
  local name=$1 dir=$2 start=$SECONDS; shift 2
  if [ -x "$BIN/$name" ]; then return; fi
  command -v go >/dev/null || { log "Go is needed to build $name (no 'go' on PATH)"; exit 1; }
  temporary_go_caches
  log "building $name (cold build: minutes; cached afterwards in $BIN)"
  (cd "$HERE/$dir" && go build -trimpath "$@" -o "$BIN/.$name.tmp" .)
  mv "$BIN/.$name.tmp" "$BIN/$name"
  log "built $name in $((SECONDS - start)) s"
}

build() {
  mkdir -p "$BIN"
  local ld="-s -w" d
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
  done
  for d in "${KIM_TESTENV_BIN_DIR:-}" "${KUBEBUILDER_ASSETS:-}"; do
    if [ -n "$d" ]; then
      for b in etcd kube-apiserver kubectl; do
        [ -x "$d/$b" ] || { log "$d (KIM_TESTENV_BIN_DIR/KUBEBUILDER_ASSETS) has no executable $b"; exit 1; }
        ln -sf "$d/$b" "$BIN/$b"
      done
      # envtest asset directories have no gardener-apiserver; it is built below then.
      if [ -x "$d/gardener-apiserver" ]; then ln -sf "$d/gardener-apiserver" "$BIN/gardener-apiserver"; fi
      break
    fi
  done
  build_one etcd etcd -ldflags "-s -w"
  build_one kube-apiserver apiserver -tags=notest,grpcnotrace -ldflags "$ld"
  [ -e "$BIN/kubectl" ] || ln -s kube-apiserver "$BIN/kubectl"
  # Gardener reports its version through k8s.io/component-base/version, like Kubernetes.
  local gminor gld="-s -w"
  gminor=$(echo "$GARDENER_VERSION" | cut -d. -f2)
  gld="$gld -X k8s.io/component-base/version.gitVersion=$GARDENER_VERSION -X k8s.io/component-base/version.gitMajor=1"
  gld="$gld -X k8s.io/component-base/version.gitMinor=$gminor -X k8s.io/component-base/version.gitTreeState=clean"
  build_one gardener-apiserver gardener -tags=notest,grpcnotrace -ldflags "$gld"
  echo "$BIN"
}

"${1:-build}"
