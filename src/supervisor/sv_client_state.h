/* sv_client_state: the state of the control connections (sv_client.h's
 * object), `sv_sup.clients`: how many, and the buffer a request is read
 * in. Apart from sv_client.h so that sv_sup.h, which holds it, includes no
 * object's interface. */
#ifndef SG_SV_CLIENT_STATE_H
#define SG_SV_CLIENT_STATE_H

#include <stddef.h>

typedef struct sv_clients_state {
    size_t n;
    char *buf; /* SG_CTL_MSG_MAX bytes: the request being read (on_client) */
} sv_clients_state;

#endif
