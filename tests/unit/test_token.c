#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "wire/token.h"

typedef struct fixture {
    char dir[64];
    char path[128];
    uint8_t secret[SG_TOKEN_SECRET_LEN];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sg-test-token-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/sub/secret", f->dir);
    sg_err err = {0};
    if (sg_token_secret_ensure(f->path, f->secret, &err) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sg_err err;
    sg_rm_rf(f->dir, &err);
    free(f);
    return 0;
}

static void test_secret_file(void **state)
{
    fixture *f = *state;
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, 65); /* 64 hex + newline */
    /* ensure again loads the same secret instead of replacing it */
    uint8_t again[SG_TOKEN_SECRET_LEN];
    sg_err err = {0};
    assert_int_equal(sg_token_secret_ensure(f->path, again, &err), 0);
    assert_memory_equal(again, f->secret, sizeof again);
    assert_int_equal(sg_token_secret_load(f->path, again, &err), 0);
    assert_memory_equal(again, f->secret, sizeof again);
    /* two fresh secrets differ */
    char other[160];
    snprintf(other, sizeof other, "%s/other", f->dir);
    assert_int_equal(sg_token_secret_ensure(other, again, &err), 0);
    assert_memory_not_equal(again, f->secret, sizeof again);
}

static void test_secret_perms(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    uint8_t s[SG_TOKEN_SECRET_LEN];
    assert_int_equal(chmod(f->path, 0640), 0);
    assert_int_equal(sg_token_secret_load(f->path, s, &err), -1);
    assert_non_null(strstr(err.msg, "mode 0640"));
    assert_non_null(strstr(err.msg, "0600"));
    assert_int_equal(chmod(f->path, 0604), 0);
    assert_int_equal(sg_token_secret_ensure(f->path, s, &err), -1);
    assert_int_equal(chmod(f->path, 0600), 0);
    assert_int_equal(sg_token_secret_load(f->path, s, &err), 0);

    char bad[160];
    snprintf(bad, sizeof bad, "%s/bad", f->dir);
    assert_int_equal(sg_write_file_atomic(bad, "zz\n", 3, 0600, &err), 0);
    assert_int_equal(sg_token_secret_load(bad, s, &err), -1);
    assert_non_null(strstr(err.msg, "hex"));
    snprintf(bad, sizeof bad, "%s/missing", f->dir);
    assert_int_equal(sg_token_secret_load(bad, s, &err), -1);
    assert_int_equal(err.code, ENOENT);
}

static void test_good_token(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    time_t before = time(NULL);
    sg_autofree char *tok = sg_token_make(f->secret, "alice", "t1", "abc123", 60, &err);
    time_t after = time(NULL); /* a slow run (valgrind, a loaded host) may cross seconds */
    assert_non_null(tok);
    sg_token_claims cl;
    assert_int_equal(sg_token_verify(f->secret, tok, time(NULL), &cl, &err), 0);
    assert_string_equal(cl.learner, "alice");
    assert_string_equal(cl.task, "t1");
    assert_string_equal(cl.sandbox, "abc123");
    assert_true(cl.exp >= before + 60 && cl.exp <= after + 60);
    assert_null(sg_token_make(f->secret, "bad name", "t", "s", 60, &err));
    assert_null(sg_token_make(f->secret, "a", "t", "s", 0, &err));
}

static void test_expired(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_autofree char *tok = sg_token_make_exp(f->secret, "a", "t", "s", 1000, &err);
    sg_token_claims cl;
    assert_int_equal(sg_token_verify(f->secret, tok, 999, &cl, &err), 0);
    assert_int_equal(sg_token_verify(f->secret, tok, 1000, &cl, &err), -1);
    assert_string_equal(err.msg, "token expired");
}

static void test_tampered_and_wrong_secret(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_token_claims cl;
    sg_autofree char *tok = sg_token_make(f->secret, "alice", "t1", "sb", 60, &err);
    sg_autofree char *evil = sg_token_make(f->secret, "mallory", "t1", "sb", 60, &err);
    /* Swap the claims of one token onto the signature of another. */
    char *dot = strchr(tok, '.'), *edot = strchr(evil, '.');
    sg_autofree char *spliced = sg_strdup_printf("%.*s%s", (int)(edot - evil), evil, dot);
    assert_int_equal(sg_token_verify(f->secret, spliced, time(NULL), &cl, &err), -1);
    assert_string_equal(err.msg, "bad signature");
    /* Flip one character of the signature. */
    size_t n = strlen(tok);
    tok[n - 2] = tok[n - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(sg_token_verify(f->secret, tok, time(NULL), &cl, &err), -1);
    assert_string_equal(err.msg, "bad signature");
    /* Another secret. */
    uint8_t other[SG_TOKEN_SECRET_LEN];
    memcpy(other, f->secret, sizeof other);
    other[0] ^= 1;
    assert_int_equal(sg_token_verify(other, evil, time(NULL), &cl, &err), -1);
    assert_string_equal(err.msg, "bad signature");
}

static void test_malformed(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    sg_token_claims cl;
    const char *bad[] = {"", "nodot", "a.b.c", ".", "abc.", "!!!.AAAA", "eyJ9.%%%"};
    for (size_t i = 0; i < SG_ARRAY_LEN(bad); i++) {
        assert_int_equal(sg_token_verify(f->secret, bad[i], time(NULL), &cl, &err), -1);
        if (!strstr(err.msg, "malformed"))
            fail_msg("'%s': %s", bad[i], err.msg);
    }
    assert_int_equal(sg_token_verify(f->secret, NULL, time(NULL), &cl, &err), -1);
    sg_autofree char *huge = malloc(SG_TOKEN_MAX + 10);
    memset(huge, 'A', SG_TOKEN_MAX + 9);
    huge[SG_TOKEN_MAX + 9] = '\0';
    assert_int_equal(sg_token_verify(f->secret, huge, time(NULL), &cl, &err), -1);
    assert_non_null(strstr(err.msg, "malformed"));
}

/* A fixed secret and claims give fixed bytes: tokens made before and after a
 * change of HMAC implementation must be identical. The expected token was
 * computed independently with python3 (json.dumps(sort_keys=True, compact
 * separators), base64.urlsafe_b64encode without '=', hmac.new(secret, body,
 * hashlib.sha256)); the MAC was cross-checked with
 *   printf %s "$body" | openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1e1f
 * which gives 6ff19e8210ec1d8980e43b7141e0da6a4bd688b76acebc8a52cdf1544a73a7c4. */
static void test_known_token(void **state)
{
    static const char expect[] =
        "eyJleHAiOjIwMDAwMDAwMDAsImwiOiJhbGljZSIsInMiOiJzYjEiLCJ0IjoidDEifQ"
        ".b_GeghDsHYmA5DtxQeDaakvWiLdqzryKUs3xVEpzp8Q";
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    for (size_t i = 0; i < sizeof secret; i++)
        secret[i] = (uint8_t)i;
    sg_err err = {0};
    sg_autofree char *tok = sg_token_make_exp(secret, "alice", "t1", "sb1", 2000000000, &err);
    assert_non_null(tok);
    assert_string_equal(tok, expect);
    sg_token_claims cl;
    assert_int_equal(sg_token_verify(secret, expect, 1999999999, &cl, &err), 0);
    assert_string_equal(cl.learner, "alice");
    assert_string_equal(cl.task, "t1");
    assert_string_equal(cl.sandbox, "sb1");
    assert_int_equal(cl.exp, 2000000000);
    /* the same claims under another secret: a well-formed but wrong MAC */
    secret[31] ^= 0x80;
    assert_int_equal(sg_token_verify(secret, expect, 1999999999, &cl, &err), -1);
    assert_string_equal(err.msg, "bad signature");
}

/* base64url without padding, for tokens made by hand below. */
static void b64url(const unsigned char *in, size_t n, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = abc[v >> 6 & 63];
        if (i + 2 < n)
            out[o++] = abc[v & 63];
    }
    out[o] = '\0';
}

/* A token with these claims, signed with the secret (as an attacker who
 * holds a token of another kind cannot). */
static char *signed_claims(const uint8_t *secret, const char *claims)
{
    char *tok = calloc(1, 1024);
    b64url((const unsigned char *)claims, strlen(claims), tok);
    unsigned char mac[32];
    unsigned int n = 0;
    HMAC(EVP_sha256(), secret, SG_TOKEN_SECRET_LEN, (unsigned char *)tok, strlen(tok), mac, &n);
    size_t l = strlen(tok);
    tok[l] = '.';
    b64url(mac, sizeof mac, tok + l + 1);
    return tok;
}

typedef int (*verify_fn)(const uint8_t *, const char *, int64_t, sg_token_claims *, sg_err *);

/* Claims the signer never makes, signed here: verify refuses each as
 * malformed (EINVAL). */
static void refused_signed(const uint8_t *secret, const char *const *bad, size_t n, verify_fn verify)
{
    for (size_t i = 0; i < n; i++) {
        sg_autofree char *tok = signed_claims(secret, bad[i]);
        sg_token_claims cl;
        sg_err err = {0};
        assert_int_equal(verify(secret, tok, (int64_t)time(NULL), &cl, &err), -1);
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.msg, "malformed token"));
    }
}


/* A kind kept apart: tok is refused by each of the others' verifiers
 * (saying mine), and its verifier refuses each of notme (saying theirs). */
static void kinds_apart(const uint8_t *secret, const char *tok, const verify_fn *others, size_t nothers,
                        const char *mine, verify_fn verify, const char *const *notme, size_t nnotme, const char *theirs)
{
    int64_t now = (int64_t)time(NULL);
    sg_token_claims cl;
    for (size_t i = 0; i < nothers; i++) {
        sg_err err = {0};
        assert_int_equal(others[i](secret, tok, now, &cl, &err), -1);
        assert_string_equal(err.msg, mine);
    }
    for (size_t i = 0; i < nnotme; i++) {
        sg_err err = {0};
        assert_int_equal(verify(secret, notme[i], now, &cl, &err), -1);
        assert_string_equal(err.msg, theirs);
    }
}

/* Three kinds, each good for one thing only: a terminal token opens a
 * terminal in one sandbox and neither streams nor reads. */
static void test_kinds(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t now = time(NULL);
    sg_autofree char *st = sg_token_make(f->secret, "ada", "t1", "abc123", 60, &err);
    sg_autofree char *rd = sg_token_make_read(f->secret, "ada", "t1", "abc123", 60, &err);
    sg_autofree char *tm = sg_token_make_terminal(f->secret, "ada", "t1", "abc123", 60, &err);
    assert_non_null(st);
    assert_non_null(rd);
    assert_non_null(tm);
    sg_autofree char *wt = sg_token_make_watch(f->secret, "ada", "t1", "abc123", 60, &err);
    assert_non_null(wt);
    sg_token_claims cl;
    assert_int_equal(sg_token_verify_watch(f->secret, wt, now, &cl, &err), 0);
    assert_true(cl.watch);
    assert_false(cl.terminal);
    assert_string_equal(cl.sandbox, "abc123");
    assert_int_equal(sg_token_verify_terminal(f->secret, tm, now, &cl, &err), 0);
    assert_true(cl.terminal);
    assert_false(cl.read);
    assert_string_equal(cl.learner, "ada");
    assert_string_equal(cl.task, "t1");
    assert_string_equal(cl.sandbox, "abc123");

    struct { const char *tok; int (*verify)(const uint8_t *, const char *, int64_t, sg_token_claims *, sg_err *);
             const char *msg; } refused[] = {
        {tm, sg_token_verify, "a terminal token cannot stream events"},
        {tm, sg_token_verify_read, "a terminal token cannot read (use a read token)"},
        {st, sg_token_verify_terminal, "a stream token cannot open a terminal (use a terminal token)"},
        {rd, sg_token_verify_terminal, "a read token cannot open a terminal (use a terminal token)"},
        {st, sg_token_verify_read, "a stream token cannot read (use a read token)"},
        {rd, sg_token_verify, "a read token cannot stream events"},
        {wt, sg_token_verify_terminal, "a watch token can only watch a terminal"},
        {wt, sg_token_verify_read, "a watch token can only watch a terminal"},
        {wt, sg_token_verify, "a watch token can only watch a terminal"},
        {tm, sg_token_verify_watch, "not a watch token"},
        {rd, sg_token_verify_watch, "not a watch token"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        err = (sg_err){0};
        assert_int_equal(refused[i].verify(f->secret, refused[i].tok, now, &cl, &err), -1);
        assert_int_equal(err.code, EACCES);
        assert_string_equal(err.msg, refused[i].msg);
    }

    /* All three names, valid, or no terminal token. */
    assert_null(sg_token_make_terminal(f->secret, "ada", "", "abc123", 60, &err));
    assert_null(sg_token_make_terminal(f->secret, "ada", "t1", "a b", 60, &err));
    assert_null(sg_token_make_terminal(f->secret, "ada", "t1", "abc123", 0, &err));

    /* Claims the signer never makes: refused even when signed. */
    const char *bad[] = {
        "{\"exp\":99999999999,\"l\":\"a\",\"r\":1,\"s\":\"s\",\"t\":\"t\",\"x\":1}",
        "{\"exp\":99999999999,\"l\":\"a\",\"s\":\"s\",\"t\":\"t\",\"x\":3}",
        "{\"exp\":99999999999,\"l\":\"a\",\"s\":\"s\",\"x\":1}",
        "{\"exp\":99999999999,\"l\":\"a\",\"s\":\"s\",\"t\":\"t\",\"x\":\"1\"}",
    };
    refused_signed(f->secret, bad, sizeof bad / sizeof *bad, sg_token_verify_terminal);
    /* The hand-made signer is right: the same claims as a good token pass. */
    sg_autofree char *good = signed_claims(f->secret,
        "{\"exp\":99999999999,\"l\":\"a\",\"s\":\"s\",\"t\":\"t\",\"x\":1}");
    assert_int_equal(sg_token_verify_terminal(f->secret, good, now, &cl, &err), 0);
}

/* A token's id is the first 16 hex digits of its SHA-256; a revoke token
 * names one id, does nothing else, and no other kind passes for it. */
static void test_revoke_kind(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t now = time(NULL);
    char id[SG_TOKEN_ID_LEN + 1];
    sg_token_id("abc", id); /* SHA-256("abc") = ba7816bf8f01cfea... (FIPS 180-2) */
    assert_string_equal(id, "ba7816bf8f01cfea");
    assert_true(sg_token_id_valid(id));
    assert_false(sg_token_id_valid("BA7816BF8F01CFEA"));
    assert_false(sg_token_id_valid("ba7816bf8f01cfe"));
    assert_false(sg_token_id_valid("ba7816bf8f01cfeaa"));
    sg_autofree char *rd = sg_token_make_read(f->secret, NULL, NULL, NULL, 60, &err);
    sg_autofree char *rv = sg_token_make_revoke(f->secret, "0123456789abcdef", 60, &err);
    assert_non_null(rd);
    assert_non_null(rv);
    assert_null(sg_token_make_revoke(f->secret, "nothex", 60, &err));
    sg_token_claims cl;
    assert_int_equal(sg_token_verify_read(f->secret, rd, now, &cl, &err), 0);
    sg_token_id(rd, id);
    assert_string_equal(cl.id, id);
    assert_int_equal(sg_token_verify_revoke(f->secret, rv, now, &cl, &err), 0);
    assert_string_equal(cl.revoke, "0123456789abcdef");
    assert_int_equal(sg_token_verify_revoke(f->secret, rv, now + 61, &cl, &err), -1);
    int (*others[])(const uint8_t *, const char *, int64_t, sg_token_claims *, sg_err *) = {
        sg_token_verify, sg_token_verify_read, sg_token_verify_terminal};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        err = (sg_err){0};
        assert_int_equal(others[i](f->secret, rv, now, &cl, &err), -1);
        assert_string_equal(err.msg, "a revoke token can only revoke");
    }
    assert_int_equal(sg_token_verify_revoke(f->secret, rd, now, &cl, &err), -1);
    assert_string_equal(err.msg, "not a revoke token");
    /* Claims the signer never makes: refused even when signed. */
    const char *bad[] = {
        "{\"exp\":99999999999,\"r\":1,\"rv\":\"0123456789abcdef\"}",
        "{\"exp\":99999999999,\"rv\":\"0123456789ABCDEF\"}",
        "{\"exp\":99999999999,\"rv\":1}",
    };
    refused_signed(f->secret, bad, sizeof bad / sizeof *bad, sg_token_verify_revoke);
}

/* A host token registers one host, does nothing else, and no other kind
 * passes for it; it expires as the others do. */
static void test_host_kind(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t now = time(NULL);
    sg_autofree char *ht = sg_token_make_host(f->secret, "host-a.example", 60, &err);
    sg_autofree char *rd = sg_token_make_read(f->secret, NULL, NULL, NULL, 60, &err);
    sg_autofree char *st = sg_token_make(f->secret, "a", "t", "s", 60, &err);
    assert_non_null(ht);
    assert_null(sg_token_make_host(f->secret, "bad name", 60, &err));
    assert_null(sg_token_make_host(f->secret, "h", 0, &err));
    sg_token_claims cl;
    assert_int_equal(sg_token_verify_host(f->secret, ht, now, &cl, &err), 0);
    assert_string_equal(cl.host, "host-a.example");
    assert_int_equal(sg_token_verify_host(f->secret, ht, now + 61, &cl, &err), -1);
    assert_string_equal(err.msg, "token expired");
    verify_fn others[] = {sg_token_verify, sg_token_verify_read, sg_token_verify_terminal, sg_token_verify_watch,
                          sg_token_verify_revoke};
    const char *notme[] = {rd, st};
    kinds_apart(f->secret, ht, others, SG_ARRAY_LEN(others),
                "a host token can only register its host",
                sg_token_verify_host, notme, SG_ARRAY_LEN(notme), "not a host token");
    /* Claims the signer never makes: refused even when signed. */
    const char *bad[] = {
        "{\"exp\":99999999999,\"h\":\"a\",\"r\":1}",
        "{\"exp\":99999999999,\"h\":\"a\",\"x\":1}",
        "{\"exp\":99999999999,\"h\":\"a b\"}",
        "{\"exp\":99999999999,\"h\":7}",
    };
    refused_signed(f->secret, bad, sizeof bad / sizeof *bad, sg_token_verify_host);
}

/* An action token aborts or destroys one sandbox, once, within a minute:
 * no other kind passes for it, it passes for no other, and one that claims
 * a longer life is refused. */
static void test_action_kind(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t now = time(NULL);
    sg_autofree char *at = sg_token_make_action(f->secret, "abort", "0123456789ab", &err);
    sg_autofree char *dt = sg_token_make_action(f->secret, "destroy", "0123456789ab", &err);
    sg_autofree char *ht = sg_token_make_host(f->secret, "host-a", 60, &err);
    sg_autofree char *rd = sg_token_make_read(f->secret, NULL, NULL, NULL, 60, &err);
    sg_autofree char *st = sg_token_make(f->secret, "a", "t", "s", 60, &err);
    sg_autofree char *tt = sg_token_make_terminal(f->secret, "a", "t", "s", 60, &err);
    assert_non_null(at);
    assert_non_null(dt);
    assert_null(sg_token_make_action(f->secret, "resume", "0123456789ab", &err));
    assert_null(sg_token_make_action(f->secret, "abort", "bad id", &err));
    sg_token_claims cl;
    assert_int_equal(sg_token_verify_action(f->secret, at, now, &cl, &err), 0);
    assert_string_equal(cl.action, "abort");
    assert_string_equal(cl.sandbox, "0123456789ab");
    assert_int_equal(strlen(cl.nonce), SG_TOKEN_NONCE_LEN);
    char first[SG_TOKEN_NONCE_LEN + 1];
    memcpy(first, cl.nonce, sizeof first);
    assert_int_equal(sg_token_verify_action(f->secret, dt, now, &cl, &err), 0);
    assert_string_equal(cl.action, "destroy");
    assert_string_not_equal(cl.nonce, first); /* each token its own nonce */
    assert_int_equal(sg_token_verify_action(f->secret, at, now + SG_TOKEN_ACTION_TTL_S + 1, &cl, &err), -1);
    assert_string_equal(err.msg, "token expired");
    /* a signer's token that claims an hour: refused, even signed */
    sg_autofree char *longer = sg_token_make_action_exp(f->secret, "abort", "0123456789ab",
                                                        "0123456789abcdef0123456789abcdef", now + 3600, &err);
    assert_non_null(longer);
    assert_int_equal(sg_token_verify_action(f->secret, longer, now, &cl, &err), -1);
    assert_non_null(strstr(err.msg, "lives too long"));
    verify_fn others[] = {sg_token_verify, sg_token_verify_read, sg_token_verify_terminal, sg_token_verify_watch,
                          sg_token_verify_revoke, sg_token_verify_host};
    const char *notme[] = {rd, st, tt, ht};
    kinds_apart(f->secret, at, others, SG_ARRAY_LEN(others),
                "an action token can only abort or destroy its sandbox through serve",
                sg_token_verify_action, notme, SG_ARRAY_LEN(notme), "not an action token");
    /* tampered: one character of the claims changed */
    sg_autofree char *bent = strdup(at);
    bent[3] = bent[3] == 'A' ? 'B' : 'A';
    assert_int_equal(sg_token_verify_action(f->secret, bent, now, &cl, &err), -1);
    /* Claims the signer never makes: refused even when signed. */
    const char *bad[] = {
        "{\"a\":\"abort\",\"exp\":99999999999,\"n\":\"0123456789abcdef0123456789abcdef\",\"r\":1,"
        "\"s\":\"x\"}",
        "{\"a\":\"abort\",\"exp\":99999999999,\"h\":\"a\",\"n\":\"0123456789abcdef0123456789abcdef\","
        "\"s\":\"x\"}",
        "{\"a\":\"abort\",\"exp\":99999999999,\"l\":\"a\",\"n\":\"0123456789abcdef0123456789abcdef\","
        "\"s\":\"x\"}",
        "{\"a\":\"resume\",\"exp\":99999999999,\"n\":\"0123456789abcdef0123456789abcdef\",\"s\":\"x\"}",
        "{\"a\":\"abort\",\"exp\":99999999999,\"n\":\"0123\",\"s\":\"x\"}",
        "{\"a\":\"abort\",\"exp\":99999999999,\"n\":\"0123456789abcdef0123456789abcdef\",\"s\":\"a b\"}",
        "{\"a\":\"abort\",\"exp\":99999999999,\"n\":\"0123456789abcdef0123456789abcdef\"}",
        "{\"a\":1,\"exp\":99999999999,\"n\":\"0123456789abcdef0123456789abcdef\",\"s\":\"x\"}",
    };
    refused_signed(f->secret, bad, sizeof bad / sizeof *bad, sg_token_verify_action);
}

/* An operator write token imports or purges, within a minute: no other
 * kind passes for it, it passes for no other, and one that claims a longer
 * life is refused. */
static void test_op_kind(void **state)
{
    fixture *f = *state;
    sg_err err = {0};
    int64_t now = time(NULL);
    sg_autofree char *it = sg_token_make_op(f->secret, "import", &err);
    sg_autofree char *pt = sg_token_make_op(f->secret, "purge", &err);
    sg_autofree char *at = sg_token_make_action(f->secret, "abort", "0123456789ab", &err);
    sg_autofree char *ht = sg_token_make_host(f->secret, "host-a", 60, &err);
    sg_autofree char *rd = sg_token_make_read(f->secret, NULL, NULL, NULL, 60, &err);
    sg_autofree char *st = sg_token_make(f->secret, "a", "t", "s", 60, &err);
    sg_autofree char *rv = sg_token_make_revoke(f->secret, "0123456789abcdef", 60, &err);
    assert_non_null(it);
    assert_non_null(pt);
    assert_null(sg_token_make_op(f->secret, "export", &err));
    sg_token_claims cl;
    assert_int_equal(sg_token_verify_op(f->secret, it, now, &cl, &err), 0);
    assert_string_equal(cl.op, "import");
    assert_int_equal(strlen(cl.nonce), SG_TOKEN_NONCE_LEN);
    assert_int_equal(sg_token_verify_op(f->secret, pt, now, &cl, &err), 0);
    assert_string_equal(cl.op, "purge");
    assert_int_equal(sg_token_verify_op(f->secret, it, now + SG_TOKEN_ACTION_TTL_S + 1, &cl, &err), -1);
    assert_string_equal(err.msg, "token expired");
    sg_autofree char *longer =
        sg_token_make_op_exp(f->secret, "purge", "0123456789abcdef0123456789abcdef", now + 3600, &err);
    assert_non_null(longer);
    assert_int_equal(sg_token_verify_op(f->secret, longer, now, &cl, &err), -1);
    assert_non_null(strstr(err.msg, "lives too long"));
    uint8_t other[SG_TOKEN_SECRET_LEN];
    memset(other, 7, sizeof other);
    assert_int_equal(sg_token_verify_op(other, it, now, &cl, &err), -1);
    assert_string_equal(err.msg, "bad signature");
    verify_fn others[] = {sg_token_verify,        sg_token_verify_read, sg_token_verify_terminal, sg_token_verify_watch,
                          sg_token_verify_revoke, sg_token_verify_host, sg_token_verify_action};
    const char *notme[] = {rd, st, ht, at, rv};
    kinds_apart(f->secret, it, others, SG_ARRAY_LEN(others),
                "an operator write token can only import or purge",
                sg_token_verify_op, notme, SG_ARRAY_LEN(notme),
                "not an operator write token (make one from the ingest's secret)");
    const char *bad[] = {
        "{\"exp\":99999999999,\"o\":\"import\",\"n\":\"0123456789abcdef0123456789abcdef\",\"r\":1}",
        "{\"exp\":99999999999,\"o\":\"export\",\"n\":\"0123456789abcdef0123456789abcdef\"}",
        "{\"exp\":99999999999,\"o\":\"import\",\"n\":\"xyz\"}",
        "{\"exp\":99999999999,\"o\":\"purge\",\"n\":\"0123456789abcdef0123456789abcdef\",\"a\":\"abort\"}",
    };
    refused_signed(f->secret, bad, sizeof bad / sizeof *bad, sg_token_verify_op);
}

/* A single-use token's nonce: taken once until its exp, then free again;
 * a full set refuses rather than forgets. */
static void test_nonces(void **state)
{
    (void)state;
    sg_token_nonces *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(sg_token_nonce_take(s, "aa", 100, 50), 0);
    assert_int_equal(sg_token_nonce_take(s, "aa", 100, 60), 1);
    assert_int_equal(sg_token_nonce_take(s, "bb", 100, 60), 0);
    assert_int_equal(sg_token_nonce_take(s, "aa", 200, 100), 0); /* expired: taken anew */
    assert_int_equal(s->n, 1);
    char n[16];
    for (int i = 1; i < SG_TOKEN_NONCES_MAX; i++) {
        snprintf(n, sizeof n, "n%d", i);
        assert_int_equal(sg_token_nonce_take(s, n, 300, 100), 0);
    }
    assert_int_equal(sg_token_nonce_take(s, "cc", 300, 100), -1);
    assert_int_equal(sg_token_nonce_take(s, "n1", 300, 100), 1);
    assert_int_equal(sg_token_nonce_take(s, "cc", 400, 300), 0); /* all expired at 300 */
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonces),
        cmocka_unit_test_setup_teardown(test_secret_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_perms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tampered_and_wrong_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test(test_known_token),
        cmocka_unit_test_setup_teardown(test_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoke_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_action_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_op_kind, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
