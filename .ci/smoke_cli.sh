#!/usr/bin/env bash
# The specrl command from the wheel, as a pip user runs it: from an empty directory, in a fresh
# virtual environment holding only the wheel (and the CPU build of torch). Run by .ci/run.
#   .ci/smoke_cli.sh VENV_BIN
set -euo pipefail
BIN="$1"
WORK="$(mktemp -d)"
cd "$WORK"
export SPECRL_HOME="${SPECRL_HOME:-$WORK/home}"  # CI's: the wheel smoke test calibrated there already
export PATH="$BIN:$PATH"

# --help answers in under a second: nothing heavy is imported to parse arguments.
"$BIN/python" - <<'PY'
import subprocess
import sys
import time

for command in (["specrl", "--help"], ["specrl", "train", "--help"], ["specrl", "evaluate", "--help"]):
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    print(f"smoke_cli: {' '.join(command)} answered in {seconds:.2f} s")
    if seconds >= 1.0:
        sys.exit(f"smoke_cli: {' '.join(command)} took {seconds:.2f} s (it must answer in under a second)")
PY

# Arguments are checked before any model loads: a bad one fails at once, naming itself.
if specrl generate --prompt "def f(" --k 2 --tau 2 2>err.txt; then
    echo "smoke_cli: --tau 2 was accepted" >&2; exit 1
fi
grep -q -- "--tau must be in \[0, 1\]" err.txt

# A short training run on one scenario writes its run folder and exports the policy by name.
specrl train --scenarios code --total-timesteps 20000 --select-scenarios --eval-scenarios \
    --validate-scenarios code --validate-prompts 1 --validate-repeats 1 --export-as smoke >train.log
run_dir=$(ls -d runs/*/)
for file in policy/metadata.json policy/policy.pt2 results.md run.json config.yaml; do
    test -f "$run_dir$file" || { echo "smoke_cli: $run_dir$file is missing" >&2; exit 1; }
done
test -f "$SPECRL_HOME/policies/smoke/metadata.json"
ls "$run_dir" | grep -q "events.out.tfevents" || ls "$run_dir"*/ | grep -q "events.out.tfevents"

# The policy, by the name it was exported as, in the evaluation and in a generation.
specrl evaluate --policy smoke --scenarios code --episodes 1 --repeats 1 --warmup 0 --no-hf \
    --sim-prompts-per-domain 1 --out eval >evaluate.log
test -f eval/results.json && test -f eval/results.md && grep -q "learned:smoke" eval/results.md
specrl generate --policy smoke --prompt "def fibonacci(n):" --max-new-tokens 24 >generate.log
grep -q '"tokens_per_s"' generate.log
echo "smoke_cli: specrl train, evaluate and generate ok from the wheel ($run_dir)"
rm -rf "$WORK"
