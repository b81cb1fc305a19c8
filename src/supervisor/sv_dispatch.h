/* sv_dispatch: a request to the handler of its op. */
#ifndef SG_SV_DISPATCH_H
#define SG_SV_DISPATCH_H

#include "supervisor/sv_sup.h"

void handle_request(sup *s, client *c, const char *buf, size_t len, int fd_in);

#endif
