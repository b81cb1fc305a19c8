/* json: jansson helpers shared by every module that speaks JSON. */
#ifndef SG_BASE_JSON_H
#define SG_BASE_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

static inline void sg_json_decrefp(json_t **j)
{
    if (*j)
        json_decref(*j);
}
#define sg_autojson __attribute__((cleanup(sg_json_decrefp)))

/* Strict parse of untrusted bytes: rejects duplicate keys, trailing
 * garbage, invalid UTF-8 and NUL. Fills err with the position on failure. */
json_t *sg_json_parse(const char *buf, size_t len, sg_err *err);

/* Compact dump; caller frees. NULL on allocation failure. */
char *sg_json_dump(const json_t *j);
/* The significant digits sg_json_dump writes a real with. */
#define SG_JSON_REAL_DIGITS 10
/* v as it comes back from sg_json_dump and a parse: a decoder that keeps
 * this (not v itself) reads the same value again after its own encoding. */
double sg_json_real_canonical(double v);

/* Copies bytes into a valid UTF-8 string, replacing every invalid sequence
 * with U+FFFD; never drops data. Caller frees; *out_len gets the length. */
char *sg_utf8_sanitize(const char *buf, size_t len, size_t *out_len);

#endif
