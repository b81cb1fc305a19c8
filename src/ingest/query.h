/* query: the ingest's URL query arguments (the read endpoints' filters and
 * numbers, the handshake's token and identity), without libwebsockets:
 * lws splits the query at '&' and decodes each fragment; these read the
 * fragments through a callback, so the parsing is tested and fuzzed on its
 * own (fuzz/fuzz_query.c). Network bytes: every case is bounded. */
#ifndef SG_QUERY_H
#define SG_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "wire/token.h"

/* Copies fragment i (NUL-terminated) into buf of size bytes: its length,
 * -1 past the last fragment, -2 when it does not fit. */
typedef int (*sg_query_frag_fn)(void *ud, int i, char *buf, size_t size);

/* one fragment (a ?token= one holds a whole token); a longer one refuses
 * the argument it is read for */
#define SG_QUERY_FRAG_MAX (SG_TOKEN_MAX + 4096)
#define SG_QUERY_FRAGS_MAX 64  /* fragments read; past them the query is refused */

/* The value of the argument name_eq ("learner="): 1 copied into buf
 * (len bytes), 0 absent, -1 refused: too long for buf, given twice, or a
 * fragment (or the query) past its bound — a filter is never dropped
 * because its value is long. */
int sg_query_arg(sg_query_frag_fn get, void *ud, const char *name_eq, char *buf, size_t len);

/* A decimal integer argument >= min: 0 absent (out untouched) or taken,
 * -1 refused (not a plain decimal, out of range, or as sg_query_arg). */
int sg_query_i64(sg_query_frag_fn get, void *ud, const char *name_eq, int64_t min, int64_t *out);

#endif
