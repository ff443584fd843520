/* backline-transport-rdma's verbs set-up (device, GID, memory, queue pairs, the handshake's peer
 * record), compiled into this package's libraries from the installed rdma package (setup.py puts
 * its native/ folder on the include path): one copy of that code, not two. */
#include "verbs.c"
