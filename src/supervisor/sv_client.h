/* sv_client: the control connections (`client`): the request read, its answers queued and sent. */
#ifndef SG_SV_CLIENT_H
#define SG_SV_CLIENT_H

#include "supervisor/sv_sup.h"

void client_flush(client *c);
void client_send(client *c, uint8_t type, const void *buf, size_t len);
void client_send_json(client *c, uint8_t type, json_t *j);
void client_result(client *c, json_t *j);
void client_error(client *c, const char *msg);
void client_close(client *c);
void on_ctl_accept(uv_poll_t *p, int status, int events);
/* A connection accepted (by the kill switch or on_ctl_accept) becomes a client. */
void client_adopt(void *ud, int fd);
/* Reads the client and its exec's output as its queue allows. */
void client_update_poll(client *c);

#endif
