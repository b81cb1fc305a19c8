/* sv_dispatch: a request to the handler of its op. */
#ifndef SG_SV_DISPATCH_H
#define SG_SV_DISPATCH_H

#include "supervisor/sv_sup.h"

void sv_dispatch_request(sv_sup *s, sv_client *c, const char *buf, size_t len, int fd_in);

#endif
