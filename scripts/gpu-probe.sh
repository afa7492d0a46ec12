#!/usr/bin/env bash
# Is there a GPU on this runner? Writes `present=true|false`; without a GPU, tells the solver which
# CUDA to assume (CONDA_OVERRIDE_CUDA) so pytorch's CUDA build resolves, and says in the summary
# how to get the GPU levels run.
#   env: CUDA (the variant's cuda_compiler_version, "None" for CPU), JOB, RUNNER_KEY
source "$(dirname "$0")/lib.sh"
gpus="$(mktemp)"
if nvidia-smi -L > "$gpus" 2>/dev/null; then
  gh_output "present=true"
  echo "- ${JOB:-this job}: $(head -n 1 "$gpus"); the ladder runs L2 and L4 on it (--expect-gpu)" | summary
else
  gh_output "present=false"
  if [ "${CUDA:-None}" != "None" ]; then gh_env "CONDA_OVERRIDE_CUDA=$CUDA"; fi
  echo "- ${JOB:-this job}: no GPU on runner ${RUNNER_NAME:-$(hostname)}, so L2 and L4 are skipped (the ladder logs why); map \"${RUNNER_KEY:-?}\" in vars.GPU_RUNNERS to a GPU runner to run them" | summary
fi
rm -f "$gpus"
