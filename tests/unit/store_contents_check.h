/* store_contents_check: one check of store_contents.h, included by the
 * SQLite (test_store.c) and PostgreSQL (test_store_pg.c) tests so both
 * backends answer the same: parts put twice stored once, a content whole
 * only when every part is there, bytes back in order, recordings by
 * session under their stream. */
#ifndef SG_STORE_CONTENTS_CHECK_H
#define SG_STORE_CONTENTS_CHECK_H

#include "base/buf.h"
#include "ingest/store_contents.h"

static int contents_take(void *ud, const void *data, size_t len)
{
    return sg_buf_append(ud, data, len);
}

static void contents_check(sg_store *s)
{
    sg_err err = {0};
    const char *sha = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    static unsigned char data[3000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7); /* NUL bytes included */
    sg_content_part p[3] = {
        {sha, 3000, 0, data, 1000}, {sha, 3000, 1000, data + 1000, 1000}, {sha, 3000, 2000, data + 2000, 1000},
    };
    int64_t size = -1;
    assert_int_equal(sg_store_content_stat(s, sha, &size, &err), 0); /* unknown */
    assert_int_equal(sg_store_put_contents(s, p, 2, &err), 0);
    assert_int_equal(sg_store_content_stat(s, sha, &size, &err), 0); /* a part missing */
    assert_int_equal(sg_store_put_contents_lazy(s, p, 3, &err), 0);  /* again: the first two ignored */
    assert_int_equal(sg_store_content_stat(s, sha, &size, &err), 1);
    assert_int_equal(size, 3000);
    sg_autobuf sg_buf b = {0};
    assert_int_equal(sg_store_content_read(s, sha, contents_take, &b, &err), 0);
    assert_int_equal(b.len, sizeof data);
    assert_memory_equal(b.data, data, sizeof data);
    const char *empty = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    sg_content_part e = {empty, 0, 0, "", 0};
    assert_int_equal(sg_store_put_contents(s, &e, 1, &err), 0);
    assert_int_equal(sg_store_content_stat(s, empty, &size, &err), 1);
    assert_int_equal(size, 0);
    sg_cast_part k[2] = {{"l", "t", "sb1", "1.cast", 0, "{\"v\":3}\n", 8}, {"l", "t", "sb1", "1.cast", 8, "[1]\n", 4}};
    assert_int_equal(sg_store_put_casts(s, k, 2, &err), 0);
    assert_int_equal(sg_store_put_casts(s, k, 1, &err), 0);
    sg_autojson json_t *list = sg_store_casts(s, NULL, NULL, "sb1", &err);
    assert_non_null(list);
    assert_int_equal(json_array_size(list), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "bytes")), 12);
    sg_buf_reset(&b);
    assert_int_equal(sg_store_cast_read(s, "l", "t", "sb1", "1.cast", contents_take, &b, &err), 0);
    assert_int_equal(b.len, 12);
    assert_memory_equal(b.data, "{\"v\":3}\n[1]\n", 12);
    assert_int_equal(sg_store_cast_read(s, "l", "t", "sb1", "2.cast", contents_take, &b, &err), -1);
    assert_int_equal(err.code, ENOENT);
}

#endif
