#!/usr/bin/env bash
# cibuildwheel before-all, inside the manylinux_2_28 container (AlmaLinux 8): the CUDA toolkit a torch
# extension build needs (nvcc, the runtime headers and libraries), CUDA_VERSION e.g. "13.0", from
# NVIDIA's RHEL 8 repository. /usr/local/cuda then points at it (CUDA_HOME in pyproject.toml).
set -euo pipefail
v=${CUDA_VERSION:?set CUDA_VERSION, e.g. 13.0}
dnf install -y dnf-plugins-core
dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
dnf install -y --setopt=install_weak_deps=False "cuda-minimal-build-${v//./-}"
dnf clean all
ln -sfn "/usr/local/cuda-$v" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
