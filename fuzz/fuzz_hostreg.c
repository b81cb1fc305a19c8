/* libFuzzer target: a sandbox host's registration (wire/hostreg.c), the
 * body of POST /v1/hosts: network bytes, behind a host token (but any
 * holder of the secret, or a host taken over, writes them).
 *
 * Invariants:
 *  - sg_hostreg_parse never crashes; a refusal names a field or the whole
 *    ("registration: ...") in a message without a control byte;
 *  - what it accepts is canonical: its text parsed again is accepted and
 *    gives the same object (the store keeps that text); it holds only the
 *    known keys; every string in it is printable ASCII (a name, a URL, a
 *    time: nothing a terminal or a page would act on); at most
 *    SG_HOSTREG_SANDBOXES_MAX sandboxes, no more than sandboxes_total. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "wire/hostreg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool printable(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

static bool strings_printable(json_t *j)
{
    const char *key;
    json_t *v;
    size_t i;
    if (json_is_string(j))
        return printable(json_string_value(j));
    if (json_is_object(j)) {
        json_object_foreach(j, key, v)
            if (!printable(key) || !strings_printable(v))
                return false;
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v)
            if (!strings_printable(v))
                return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_err err = {0};
    json_t *reg = sg_hostreg_parse((const char *)data, size, &err);
    if (!reg) {
        /* the message names the field, its quoted bytes escaped: no control
         * byte (a key's printable UTF-8 may stay) */
        for (const char *m = err.msg; *m; m++)
            if ((unsigned char)*m < 0x20 || *m == 0x7f)
                abort();
        if (!err.msg[0])
            abort();
        return 0;
    }
    static const char *const keys[] = {"v", "name", "serve_url", "version", "heartbeat_s", "sandboxes_total",
                                       "capacity", "sandboxes"};
    if (json_object_size(reg) != sizeof keys / sizeof *keys)
        abort();
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!json_object_get(reg, keys[i]))
            abort();
    size_t n = json_array_size(json_object_get(reg, "sandboxes"));
    if (n > SG_HOSTREG_SANDBOXES_MAX || (json_int_t)n > json_integer_value(json_object_get(reg, "sandboxes_total")) ||
        !strings_printable(reg))
        abort();
    char *text = sg_json_dump(reg);
    if (!text)
        abort();
    json_t *again = sg_hostreg_parse(text, strlen(text), &err);
    if (!again || !json_equal(again, reg))
        abort();
    json_decref(again);
    free(text);
    json_decref(reg);
    return 0;
}
