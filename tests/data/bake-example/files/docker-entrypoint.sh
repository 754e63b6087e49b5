#!/bin/sh
# A stand-in for OpenRLHF's dockerfile/docker-entrypoint.sh (not copied): run the given command,
# as the user named by $LOCAL_USER_ID when it is set (gosu is installed by the apt layer).
set -e
if [ -n "${LOCAL_USER_ID:-}" ]; then
    id -u openrlhf >/dev/null 2>&1 || useradd --shell /bin/bash --uid "$LOCAL_USER_ID" --non-unique --create-home openrlhf
    exec gosu openrlhf "$@"
fi
exec "$@"
