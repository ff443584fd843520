#!/usr/bin/env bash
# Create .venv and install Backline: the core, then the plugins, which are built against
# the installed core's header (hence --no-build-isolation).
#   ./install.sh          everything needed to run (core, memcpy, rdma and ucx transports, the FPGA controller
#                         of rdma, BP+OSD decoder,
#                         compiler with its PennyLane frontend, stim device, ORC executor)
#   ./install.sh --dev    plus what the test suite needs (pytest, ldpc, stim/sinter, CPU torch + triton,
#                         Debian's aarch64 cross compiler)
set -euo pipefail
cd "$(dirname "$0")"
dev=0
case "${1:-}" in
  "") ;;
  --dev) dev=1 ;;
  *) echo "usage: ./install.sh [--dev]" >&2; exit 2 ;;
esac
# The rdma transport is built against libibverbs (Debian: libibverbs-dev) and lists devices
# through Debian's pyverbs; it installs and imports on a machine without an RDMA device, and
# says so when a placement needs one.
# The ucx transport is built against libucp (Debian: libucx-dev; ucx-utils has ucx_info and
# ucx_perftest).
rdma_debs="libibverbs-dev ibverbs-providers rdma-core python3-pyverbs"
ucx_debs="libucx-dev ucx-utils"
if ! dpkg -s $rdma_debs $ucx_debs >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: apt-get install $rdma_debs $ucx_debs (for backline-transport-rdma and -ucx)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $rdma_debs $ucx_debs >/dev/null
  elif [ ! -f /usr/include/infiniband/verbs.h ] || [ ! -f /usr/include/ucp/api/ucp.h ]; then
    echo "install.sh: the rdma and ucx transports need libibverbs' and libucp's headers: sudo apt-get install" \
      "$rdma_debs $ucx_debs" >&2
    exit 2
  fi
fi
# The test suite cross-compiles the FPGA controller's driver for the board's aarch64 cores
# (Debian: gcc-aarch64-linux-gnu, and the aarch64 C library headers it does not pull in without
# Recommends, libc6-dev-arm64-cross).
cross_debs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
if [ "$dev" = 1 ] && ! dpkg -s $cross_debs >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: apt-get install $cross_debs (for the FPGA driver's aarch64 build test)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $cross_debs >/dev/null
  else
    echo "install.sh: the test suite needs the aarch64 cross compiler: sudo apt-get install $cross_debs" >&2
    exit 2
  fi
fi
python3 -m venv .venv
.venv/bin/pip install -U pip setuptools wheel
if [ "$dev" = 1 ]; then
  .venv/bin/pip install -e '.[plot,test]'
  .venv/bin/pip install --no-build-isolation -e plugins/transport-memcpy -e 'plugins/decoder-bpod[test]' \
    -e 'plugins/decoder-lut[test]' -e 'plugins/transport-rdma[test]' -e 'plugins/transport-ucx[test]' \
    -e plugins/transport-cuqr
  # built against the installed rdma plugin's verbs set-up (its setup.py imports it): after it
  .venv/bin/pip install --no-build-isolation -e 'plugins/transport-fpga[test]'
  .venv/bin/pip install -e 'compiler[frontend,test]'
  .venv/bin/pip install -e plugins/device-stim -e 'plugins/executor-orc[test]' -e 'plugins/decoder-pymatching[test]' \
    -e 'plugins/decoder-ldpc[test]'
  .venv/bin/pip install --no-build-isolation -e 'plugins/qec[test]'
  .venv/bin/pip install --no-build-isolation -e 'plugins/sweeps[test]'
  # The CPU build of torch (pinned: newer releases pull a multi-GB CUDA build); Triton
  # kernels are tested under TRITON_INTERPRET=1 on CPU tensors.
  .venv/bin/pip install torch==2.13.0 triton
else
  .venv/bin/pip install -e '.[plot]'
  .venv/bin/pip install --no-build-isolation -e plugins/transport-memcpy -e plugins/decoder-bpod -e plugins/decoder-lut \
    -e plugins/transport-rdma -e plugins/transport-ucx -e plugins/transport-cuqr
  .venv/bin/pip install --no-build-isolation -e plugins/transport-fpga
  .venv/bin/pip install -e 'compiler[frontend]'
  .venv/bin/pip install -e plugins/device-stim -e plugins/executor-orc -e plugins/decoder-pymatching -e plugins/decoder-ldpc
  .venv/bin/pip install --no-build-isolation -e plugins/qec
  .venv/bin/pip install --no-build-isolation -e 'plugins/sweeps[plot]'
fi
