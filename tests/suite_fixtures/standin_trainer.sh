#!/bin/sh
# Stand-in trainer for the suite tests (orchestration, not training).
#
# The suite tests are about how cvs-tui launches, follows, judges and stops a trainer on real nodes
# (SSH, Docker), so this POSIX sh script takes MaxText's place: the busybox test image has no Python
# and real MaxText end to end is covered by its own tests. It is started exactly as MaxText is
# (`$PYTHON SCRIPT YAML`, here `sh standin_trainer.sh maxtext.nodeN.yml`) and prints MaxText-format
# lines (System Information, Num_devices, Per train step, `completed step:` with a falling loss).
#
# The behaviour comes from `standin_mode` in the YAML (a sweep override) or CVS_STANDIN_MODE (env):
#   clean   every step, exit 0
#   crash   after 3 steps the failing rank exits 3 without any error line
#   fatal   after 3 steps the failing rank prints a JAX distributed-service fatal line and exits 1
#   hang    after 3 steps no rank prints anything ever again
#   nan     at step 3 every rank logs a NaN loss, "Aborting training due to NaN loss." and exits 1
# CVS_STANDIN_FAIL_RANK (default 1) is the failing rank of crash/fatal; the other ranks then wait
# forever, as real ranks wait on a collective with a dead peer. CVS_STANDIN_STEP_SLEEP (default 0.05)
# is the pause between steps (raise it for a slowly streaming run). CVS_STANDIN_START_SLEEP (default 0)
# is a pause before the first step (start-up/compile time). CVS_STANDIN_SLOW_RANK (default: none) pauses
# CVS_STANDIN_SLOW_SLEEP seconds between its steps instead: a node that lags the others.
# Every mode first dumps its environment and its YAML between markers, so tests can check what
# reached the node.
set -u
CONFIG=${1:?usage: standin_trainer.sh MAXTEXT_YAML}
MODE=$(sed -n 's/^standin_mode: *\([a-z]*\).*/\1/p' "$CONFIG" | head -n 1)
MODE=${MODE:-${CVS_STANDIN_MODE:-clean}}
RANK=${NODE_RANK:-0}
FAIL_RANK=${CVS_STANDIN_FAIL_RANK:-1}
SLEEP=${CVS_STANDIN_STEP_SLEEP:-0.05}
if [ "$RANK" = "${CVS_STANDIN_SLOW_RANK:-none}" ]; then SLEEP=${CVS_STANDIN_SLOW_SLEEP:-0.5}; fi
STEPS=$(sed -n 's/^steps: *\([0-9][0-9]*\).*/\1/p' "$CONFIG" | head -n 1)
STEPS=${STEPS:-10}

ts() { date -u +%H:%M:%S.000000; }
info() { printf 'I1130 %s 140000000000001 %s] %s\n' "$(ts)" "$1" "$2"; }

echo "STANDIN ENV BEGIN"
env  # unsorted: a multi-line value stays in one piece
echo "STANDIN ENV END"
echo "STANDIN YAML BEGIN"
cat "$CONFIG"
echo "STANDIN YAML END"
info max_utils.py:835 "System Information: Jax Version: 0.0.0-standin"
info max_utils.py:837 "System Information: Jax Backend: cpu"
info maxtext_utils.py:2098 "Num_devices: 1, shape (1, 1, 1)"
echo "Per train step:"
echo " Total TFLOPs: 0.00 "
echo " split as 95.24% learnable weight flops and 4.76% attention flops"

sleep "${CVS_STANDIN_START_SLEEP:-0}"
step=0
loss=8000  # thousandths
while [ "$step" -lt "$STEPS" ]; do
  if [ "$MODE" = crash ] && [ "$step" -eq 3 ]; then
    if [ "$RANK" = "$FAIL_RANK" ]; then exit 3; fi
    while :; do sleep 3600; done
  fi
  if [ "$MODE" = hang ] && [ "$step" -eq 3 ]; then
    while :; do sleep 3600; done
  fi
  if [ "$MODE" = fatal ] && [ "$step" -eq 3 ]; then
    if [ "$RANK" = "$FAIL_RANK" ]; then
      printf 'F1130 %s 140000000000001 client.cc:101] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details.\n' "$(ts)"
      exit 1
    fi
    while :; do sleep 3600; done
  fi
  if [ "$MODE" = nan ] && [ "$step" -eq 3 ]; then
    info metric_logger.py:265 "completed step: $step, seconds: 0.050, TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: nan, lm_loss: nan, perplexity: nan"
    info metric_logger.py:349 "Aborting training due to NaN loss."
    exit 1
  fi
  l=$(printf '%d.%03d' $((loss / 1000)) $((loss % 1000)))
  info metric_logger.py:265 "completed step: $step, seconds: 0.050, TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: $l, lm_loss: $l, perplexity: 2980.958"
  loss=$((loss - loss / 40))  # falls every step, never below zero
  step=$((step + 1))
  sleep "$SLEEP"
done
exit 0
