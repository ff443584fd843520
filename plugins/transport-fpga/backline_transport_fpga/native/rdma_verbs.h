/*
 * rdma_verbs.h -- backline-transport-rdma's verbs set-up (device, GID, memory, queue pairs, the
 * handshake's peer record), which this package's libraries build against: its declared API,
 * verbs.h (setup.py puts backline_transport_rdma.verbs_include() on the include path and
 * compiles backline_transport_rdma.verbs_sources() in), checked here for the version this
 * package was written for. One copy of that code, not two.
 */
#ifndef BACKLINE_FPGA_RDMA_VERBS_H
#define BACKLINE_FPGA_RDMA_VERBS_H

#include "verbs.h"

#if !defined(BL_VERBS_API_VERSION) || BL_VERBS_API_VERSION != 1
#error "backline-transport-fpga is written for version 1 of backline-transport-rdma's verbs API (verbs.h); install the matching backline-transport-rdma"
#endif

#endif
