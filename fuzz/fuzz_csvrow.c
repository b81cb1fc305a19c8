/* libFuzzer target: `export --format csv`'s row written from the ingest's
 * text (src/cli/export_csv.c's scanner, no tree) against the row written
 * from jansson's parse of the same text. The rows are the ingest's answer
 * and their payloads are learner-controlled.
 *
 * Input: any bytes. When they parse as a JSON object (duplicate keys
 * refused, as the ingest validated the payload) whose "payload" is an
 * object, its compact dump is the row's text (as sg_evpage_scan hands it:
 * fuzz_evrows holds that half). Invariant: both paths succeed and write
 * the same bytes. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *write_row(json_t *ev, const char *text, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        abort();
    sg_export x = {.fmt = &sg_export_csv, .out = f};
    sg_err err;
    int r = sg_export_csv.begin(&x, &err) < 0 ? -1 : text ? sg_export_csv.row_text(&x, text, strlen(text), &err) : sg_export_csv.row(&x, ev, &err);
    if (r < 0 || sg_export_csv.end(&x, &err) < 0) /* begin sorts the columns; end frees buffers */
        abort();
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *ev = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(ev) || !json_is_object(json_object_get(ev, "payload"))) {
        json_decref(ev);
        return 0;
    }
    char *text = json_dumps(ev, JSON_COMPACT);
    if (!text)
        abort();
    size_t tlen = 0, jlen = 0;
    char *from_text = write_row(NULL, text, &tlen), *from_tree = write_row(ev, NULL, &jlen);
    if (tlen != jlen || memcmp(from_text, from_tree, tlen) != 0)
        abort();
    free(from_text);
    free(from_tree);
    free(text);
    json_decref(ev);
    return 0;
}
