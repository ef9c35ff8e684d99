#!/bin/sh
# The official Envoy image's entrypoint contract, which the allocator's Deployments rely on (they give only args):
# - arguments that start with "-" are Envoy's: `envoy` is put in front of them;
# - $loglevel, when set, adds --log-level to an envoy command;
# - started as root, the command runs as user envoy (uid 101; ENVOY_UID / ENVOY_GID renumber it), unless
#   ENVOY_UID=0 keeps root.
set -e
if [ "${1#-}" != "$1" ]; then
  set -- envoy "$@"
fi
if [ "$1" = envoy ] && [ -n "${loglevel:-}" ]; then
  set -- "$@" --log-level "$loglevel"
fi
if [ "$(id -u)" = 0 ] && [ "${ENVOY_UID:-}" != 0 ]; then
  if [ -n "${ENVOY_UID:-}" ]; then usermod -u "$ENVOY_UID" envoy; fi
  if [ -n "${ENVOY_GID:-}" ]; then groupmod -g "$ENVOY_GID" envoy; fi
  chown envoy:envoy /dev/stdout /dev/stderr
  exec setpriv --reuid envoy --regid envoy --init-groups "$@"
fi
exec "$@"
