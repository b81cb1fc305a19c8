/* sv_client: the control connections (`sv_client`): the request read, its answers queued and sent. */
#ifndef SG_SV_CLIENT_H
#define SG_SV_CLIENT_H

#include "supervisor/sv_sup.h"

typedef struct sv_outmsg {
    struct sv_outmsg *next;
    uint8_t type;
    size_t len;
    char data[];
} sv_outmsg;

struct sv_client {
    sv_sup *s;
    int fd;
    uv_poll_t poll;
    sv_outmsg *qhead, *qtail;
    size_t qbytes;
    sv_exec *ex;
    bool requested; /* one request per connection: an exec's takes signals only */
    char via[SG_CTL_VIA_MAX + 1]; /* its request's "via" ("": none): the actor's (sv_actor) */
    bool close_after_flush;
    bool closing;
    bool test_drop; /* tests only: its request left unread, closed at its exec's end (sv_client.c) */
    /* set to NULL when the connection closes: a reply that comes after
     * the request's handler returned (a cp off the loop, sv_cp.c) */
    sv_client **weak;
};

void sv_client_flush(sv_client *c);
void sv_client_send(sv_client *c, uint8_t type, const void *buf, size_t len);
void sv_client_send_json(sv_client *c, uint8_t type, json_t *j);
void sv_client_result(sv_client *c, json_t *j);
void sv_client_error(sv_client *c, const char *msg);
void sv_client_close(sv_client *c);
void sv_client_on_accept(uv_poll_t *p, int status, int events);
/* A connection accepted (by the kill switch or sv_client_on_accept) becomes a client. */
void sv_client_adopt(void *ud, int fd);
/* Reads the client and its exec's output as its queue allows. */
void sv_client_update_poll(sv_client *c);

#endif
