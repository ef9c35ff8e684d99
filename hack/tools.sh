#!/usr/bin/env bash
# Builds (once) the binaries of the embedded control plane into
# ${XDG_CACHE_HOME:-~/.cache}/tollgate/<k8s-version>/bin and prints that directory.
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  from k8s.io/kubernetes (wrapper module)
#   kubelet, kube-proxy                                               the same, for the embedded cluster's real node
#   etcd                                                              from go.etcd.io/etcd/server/v3 (same module graph)
#   kwok, kwokctl                                                     go install sigs.k8s.io/kwok/cmd/...
#   helm                                                              go install helm.sh/helm/v3/cmd/helm
#   coredns                                                           go install github.com/coredns/coredns (the node's DNS)
#   crane                                                             go install github.com/google/go-containerregistry/cmd/crane
#   tilt                                                              built from ../shared/vendor/tilt (offline source)
# `hack/tools.sh jaeger` builds only Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, wrapper module hack/jaeger)
# into the same directory: the trace backend of make dev and of the tracing e2e test. It is not part of the default
# set: make test starts it in the background once the control plane is built (cold it takes minutes), make dev runs
# it first. Two builds of the same set take one lock, so a second one waits and then finds it built.
# A binary named by an environment variable (KUBE_APISERVER_BINARY, ETCD_BINARY, JAEGER_BINARY, ...) or already on
# PATH is linked instead of built. A second run does nothing.
# Progress goes to stderr, each line with the seconds since the start: what is built or installed and from where,
# every TOLLGATE_TOOLS_TICK seconds (default 30) that a long build is still running, and at the end what was cached.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/$K8S_VERSION/bin"
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS="-trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

log() { printf 'tools: [%4d s] %s\n' "$SECONDS" "$*" >&2; }

cached=() made=0
hit() { cached+=("$1"); }

# step WHAT COMMAND...: runs COMMAND, saying every TOLLGATE_TOOLS_TICK seconds that WHAT is still running, and how
# long it took.
step() {
  local what=$1 start=$SECONDS tick=${TOLLGATE_TOOLS_TICK:-30} ticker rc=0
  shift
  # The ticker ends with this script, even when it is killed outright (kill -0 $$: $$ is this script's pid).
  (while sleep "$tick" </dev/null >/dev/null 2>&1 9>&- && kill -0 $$ 2>/dev/null; do
    log "still $what ($((SECONDS - start)) s)"
  done) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    log "$what failed (exit $rc) after $((SECONDS - start)) s"
    return "$rc"
  fi
  log "done $what in $((SECONDS - start)) s"
}

# link_existing NAME ENVVAR: use a binary given by ENVVAR or found on PATH; returns 1 when none.
link_existing() {
  local name=$1 var=$2 path="${!2:-}"
  if [ -z "$path" ] && [ "${TOLLGATE_TOOLS_FROM_PATH:-0}" = 1 ]; then
    path=$(command -v "$name" || true)
  fi
  [ -n "$path" ] && [ -x "$path" ] || return 1
  [ "$path" -ef "$bin/$name" ] || ln -sf "$path" "$bin/$name"
  log "$name: using $path"
  cached+=("$name")
}

# need_go WHAT: Go is on PATH, or say what cannot be built without it and how to get past that.
need_go() {
  command -v go >/dev/null && return 0
  log "cannot build $1: no go on PATH. Install Go 1.21 or newer (https://go.dev/dl; GOTOOLCHAIN=auto then fetches"
  log "the version hack/k8s/go.mod names), or name prebuilt binaries: KUBE_APISERVER_BINARY=..., HELM_BINARY=..."
  exit 3
}

k8s_ldflags() {
  local major minor commit date
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor=${K8S_VERSION#v"$major".}; minor=${minor%%.*}
  commit=$(printf '%040d' 0)
  date=1970-01-01T00:00:00Z
  local flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags="$flags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags="$flags -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  printf '%s' "$flags"
}

build_control_plane() {
  local wanted=() name var
  for name in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet kube-proxy; do
    var=$(printf '%s_BINARY' "$name" | tr 'a-z-' 'A-Z_')
    if [ -x "$bin/$name" ]; then hit "$name"; else link_existing "$name" "$var" || wanted+=("$name"); fi
  done
  [ ${#wanted[@]} -gt 0 ] || return 0
  need_go "${wanted[*]}"
  step "resolving k8s.io/kubernetes@$K8S_VERSION's modules (hack/k8s/go.mod)" "$here/k8s/generate.sh" "$K8S_VERSION"
  local pkgs=()
  for name in "${wanted[@]}"; do
    case $name in
      etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$name") ;;
    esac
  done
  log "building ${wanted[*]} from k8s.io/kubernetes@$K8S_VERSION with $(go version | cut -d' ' -f3) (cold: tens of minutes)"
  local out; out=$(mktemp -d)
  step "building ${wanted[*]}" go -C "$here/k8s" build -mod=mod -ldflags "$(k8s_ldflags)" -o "$out/" "${pkgs[@]}"
  if [ -x "$out/server" ]; then mv "$out/server" "$out/etcd"; fi  # go names go.etcd.io/etcd/server/v3 "server"
  for name in "${wanted[@]}"; do mv "$out/$name" "$bin/$name"; done
  made=$((made + ${#wanted[@]}))
  rmdir "$out"
}

go_install() {
  local name=$1 module=$2
  local var; var=$(printf '%s_BINARY' "$name" | tr 'a-z-' 'A-Z_')
  if [ -x "$bin/$name" ]; then hit "$name"; return 0; fi
  link_existing "$name" "$var" && return 0
  need_go "$name"
  log "$name: installing $module (go install: downloads and builds, a few minutes cold)"
  GOBIN="$bin" step "installing $name" go install "$module"
  made=$((made + 1))
}

# Tilt: one already on PATH wins; otherwise built once from the offline source archive beside the
# checkout (TILT_SOURCE_ARCHIVE overrides it). Without either, nothing is built and the Tilt tests
# say why they skip (or fail, when CI is set: tollgate.testing.requirements).
build_tilt() {
  if [ -x "$bin/tilt" ]; then hit tilt; return 0; fi
  TOLLGATE_TOOLS_FROM_PATH=1 link_existing tilt TILT_BINARY && return 0
  local archive="${TILT_SOURCE_ARCHIVE:-$here/../../shared/vendor/tilt/tilt-$TILT_VERSION-src.tar.xz}"
  if [ ! -f "$archive" ]; then
    log "tilt: no tilt on PATH and no source archive at $archive; the Tilt tests will be skipped (failed when CI is set)"
    return 0
  fi
  need_go tilt
  log "tilt: building v$TILT_VERSION from $archive (cold: about 5 to 10 minutes on 2 cores)"
  local work; work=$(mktemp -d)
  step "unpacking the tilt source" tar -xJf "$archive" -C "$work"
  CGO_ENABLED=1 GOFLAGS=-mod=vendor step "building tilt" go -C "$work/tilt-$TILT_VERSION" build -trimpath \
    -tags=osusergo -ldflags "-s -w -X main.version=$TILT_VERSION" -o "$work/tilt" ./cmd/tilt
  mv "$work/tilt" "$bin/tilt"
  made=$((made + 1))
  rm -rf "$work"
  log "tilt: $("$bin/tilt" version)"
}

# Jaeger v2 from the module proxy through hack/jaeger/go.mod (its go.sum pins every module); the version it was built
# at is kept beside it, so a new JAEGER_VERSION builds again.
build_jaeger() {
  local stamp="$bin/jaeger.version"
  if [ -x "$bin/jaeger" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$JAEGER_VERSION" ]; then hit jaeger; return 0; fi
  link_existing jaeger JAEGER_BINARY && return 0
  need_go jaeger
  log "jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION (hack/jaeger/go.mod; cold: minutes)"
  local out; out=$(mktemp -d)
  step "building jaeger" go -C "$here/jaeger" build -mod=readonly -ldflags "-s -w" -o "$out/jaeger" \
    github.com/jaegertracing/jaeger/cmd/jaeger
  mv "$out/jaeger" "$bin/jaeger"
  echo "$JAEGER_VERSION" >"$stamp"
  rmdir "$out"
  made=$((made + 1))
}

what=${1:-control-plane}
case $what in
  control-plane | jaeger) ;;
  *) log "unknown argument $what: hack/tools.sh [jaeger]"; exit 2 ;;
esac
if [ "$what" = jaeger ]; then
  log "jaeger $JAEGER_VERSION in $bin"
else
  log "control-plane binaries for Kubernetes $K8S_VERSION in $bin"
fi
# One make tools at a time per cache: a second one (another checkout, another terminal) waits for the first and then
# finds everything built, instead of building it all again beside it. Jaeger has a lock of its own: its build shares
# no file with the control plane's, and make test's background build of it must not hold up the steps that need
# the control plane.
if command -v flock >/dev/null; then
  lock="${bin%/bin}/tools.lock"
  if [ "$what" = jaeger ]; then lock="${bin%/bin}/jaeger.lock"; fi
  exec 9>>"$lock"
  if ! flock -n 9; then
    step "waiting for another make tools (pid $(cat "$lock.pid" 2>/dev/null || echo '?')) to finish with $bin" flock 9
  fi
  echo $$ >"$lock.pid"
fi
if [ "$what" = jaeger ]; then
  build_jaeger
else
  build_control_plane
  go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  go_install kwokctl "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  go_install coredns "github.com/coredns/coredns@$COREDNS_VERSION"
  go_install crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
  build_tilt
fi
log "ready: ${#cached[@]} cached (${cached[*]:-none}), $made built or installed, in $SECONDS s"
echo "$bin"
