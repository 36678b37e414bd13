#!/usr/bin/env bash
# cibuildwheel before-build / before-test: torch TORCH_VERSION built for CUDA CUDA_VERSION, from
# PyTorch's own index (PyPI carries one CUDA build per torch release), plus any packages given as
# arguments. Checks that the torch installed is built for that CUDA major version.
set -euo pipefail
: "${TORCH_VERSION:?set TORCH_VERSION, e.g. 2.11.0}" "${CUDA_VERSION:?set CUDA_VERSION, e.g. 13.0}"
python -m pip install --no-cache-dir "torch==$TORCH_VERSION" "$@" \
  --index-url "https://download.pytorch.org/whl/cu${CUDA_VERSION//./}" --extra-index-url https://pypi.org/simple
python - <<PY
import torch
want = "$CUDA_VERSION".split(".")[0]
assert (torch.version.cuda or "").split(".")[0] == want, f"torch {torch.__version__} has CUDA {torch.version.cuda}, want {want}.x"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
PY
