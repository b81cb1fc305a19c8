/* detachkeys: the key sequence that detaches a terminal from a detachable
 * shell (`sandglass shell`, `exec -t --detach-keys`), docker's way: keys
 * written "ctrl-p,ctrl-q" (ctrl-a..z, ctrl-@ [ \ ] ^ _, or one printable
 * character each); the default ctrl-p,ctrl-q. Sans-I/O: the relay passes
 * each read of the keyboard through sg_detach_filter, which holds back a
 * started sequence (nothing of it reaches the shell until the next key
 * says it is not the sequence) and says when it is complete. */
#ifndef SG_CLI_DETACHKEYS_H
#define SG_CLI_DETACHKEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SG_DETACH_KEYS_MAX 8
#define SG_DETACH_KEYS_DEFAULT "ctrl-p,ctrl-q"

typedef struct sg_detach_keys {
    unsigned char key[SG_DETACH_KEYS_MAX];
    size_t n;       /* 0: detaching is off */
    size_t matched; /* keys of the sequence seen so far (held back) */
} sg_detach_keys;

/* Parses spec ("" turns detaching off). -1 with err on a bad spec. */
int sg_detach_keys_parse(const char *spec, sg_detach_keys *k, sg_err *err);

/* Filters in[0..n) into out (room for n + SG_DETACH_KEYS_MAX bytes): what
 * goes to the shell now. Returns true when the sequence completed: the
 * bytes after it are dropped (the caller detaches). */
bool sg_detach_filter(sg_detach_keys *k, const char *in, size_t n, char *out, size_t *out_len);

#endif
