/* libFuzzer target: the ingest's handshake token (token.c), which arrives
 * from the network in an Authorization header.
 *
 * Invariants:
 *  - the input as a token: sg_token_verify and sg_token_verify_read each
 *    accept it exactly when a verifier written here from token.h's format
 *    does (base64url without padding or stray bits, HMAC-SHA256 over the
 *    claims' text, claims a JSON object with an integer exp after now; a
 *    stream token has no "r" and valid l, t, s names; a read token has
 *    "r": 1 and each of l, t, s absent or a valid name; at most
 *    SG_TOKEN_MAX bytes), and then hand out those claims;
 *  - the input signed here as a token's claims: the same agreement, so the
 *    claims checks behind the signature are fuzzed too;
 *  - a token made by the signer (names from the input) verifies until its
 *    exp and not from exp on, with the names it was made for; no mutation
 *    of it (a byte changed anywhere, cut short, extended) verifies, nor does
 *    it under another secret; a read token made for the same names is a
 *    read token with that scope, and neither kind passes for the other;
 *  - the same for action tokens (sg_token_verify_action against a
 *    verifier written here: exactly "a" abort|destroy, "s" a name, "n" 32
 *    lowercase hex digits and an integer "exp" after now and at most
 *    SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S ahead), and one made by
 *    the signer verifies as that action on that sandbox and as no other kind;
 *  - an operator write token (sg_token_verify_op): whatever it accepts is
 *    refused by the stream, read and action verifiers and holds "import" or
 *    "purge", a 32-digit nonce and an exp within SG_TOKEN_ACTION_TTL_S +
 *    SG_TOKEN_ACTION_SKEW_S of now; one made by the signer verifies as that
 *    op until exp, and as no other kind. */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bounds.h"
#include "base/json.h"
#include "wire/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t secret[SG_TOKEN_SECRET_LEN] = {
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
#define NOW 1900000000LL

static int b64v(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '-' ? 62 : c == '_' ? 63 : -1;
}

/* Strict base64url without padding: a bit stream, no leftover one bits. */
static bool b64_decode(const char *s, size_t n, unsigned char *out, size_t *on)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64v((unsigned char)s[i]);
        if (v < 0)
            return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6 || acc != 0)
        return false; /* a lone sixth, or stray bits */
    *on = o;
    return true;
}

static char *b64_encode(const unsigned char *in, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char *out = malloc(n * 4 / 3 + 4);
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8) | in[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = a[(acc >> bits) & 63];
        }
    }
    if (bits)
        out[o++] = a[(acc << (6 - bits)) & 63];
    out[o] = '\0';
    return out;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > SG_NAME_MAX || !strcmp(s, ".") || !strcmp(s, ".."))
        return false;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@", *s))
            return false;
    return true;
}

typedef enum { REFUSED, ACCEPTED } verdict;

/* A scope claim: absent (a read token only, then "") or a valid name. */
static bool claim(json_t *j, const char *k, bool read, char *dst)
{
    json_t *v = json_object_get(j, k);
    if (!v)
        return read;
    const char *s = json_string_value(v);
    if (!s || !name_ok(s))
        return false;
    snprintf(dst, SG_NAME_MAX + 1, "%s", s);
    return true;
}

/* token.h's verifiers, written again. c: where to put the claims. */
static verdict reference(const char *tok, int64_t now, bool read, sg_token_claims *c)
{
    size_t len = strlen(tok);
    const char *dot = strchr(tok, '.');
    if (!len || len > SG_TOKEN_MAX || !dot || strchr(dot + 1, '.'))
        return REFUSED;
    unsigned char sig[SG_TOKEN_MAX], mac[32], raw[SG_TOKEN_MAX];
    size_t sn, rn;
    if (!b64_decode(dot + 1, strlen(dot + 1), sig, &sn) || sn != 32)
        return REFUSED;
    unsigned int mn = 0;
    if (!HMAC(EVP_sha256(), secret, sizeof secret, (const unsigned char *)tok, (size_t)(dot - tok), mac, &mn))
        abort();
    if (CRYPTO_memcmp(mac, sig, 32) != 0)
        return REFUSED;
    if (!b64_decode(tok, (size_t)(dot - tok), raw, &rn))
        return REFUSED;
    json_t *j = json_loadb((const char *)raw, rn, JSON_REJECT_DUPLICATES, NULL);
    json_t *r = json_object_get(j, "r");
    verdict v = REFUSED;
    /* "x" (terminal, watch), "rv" (revoke), "h" (host) and "a" (action): the other kinds,
     * never a stream or read token */
    bool other = json_object_get(j, "x") || json_object_get(j, "rv") || json_object_get(j, "h") ||
                 json_object_get(j, "a");
    if (json_is_object(j) && !other && json_is_integer(json_object_get(j, "exp")) &&
        (r ? json_is_integer(r) && json_integer_value(r) == 1 : true) && !r == !read &&
        claim(j, "l", read, c->learner) && claim(j, "t", read, c->task) &&
        claim(j, "s", read, c->sandbox) && now < json_integer_value(json_object_get(j, "exp"))) {
        c->exp = json_integer_value(json_object_get(j, "exp"));
        c->read = read;
        v = ACCEPTED;
    }
    json_decref(j);
    return v;
}

static bool nonce_ok(const char *s)
{
    size_t n = strlen(s);
    return n == SG_TOKEN_NONCE_LEN && strspn(s, "0123456789abcdef") == n;
}

/* token.h's action verifier, written again. */
static verdict reference_action(const char *tok, int64_t now, sg_token_claims *c)
{
    const char *dot = strchr(tok, '.');
    if (!dot)
        return REFUSED;
    unsigned char sig[SG_TOKEN_MAX], mac[32], raw[SG_TOKEN_MAX];
    size_t sn, rn, len = strlen(tok);
    unsigned int mn = 0;
    if (!len || len > SG_TOKEN_MAX || strchr(dot + 1, '.') || !b64_decode(dot + 1, strlen(dot + 1), sig, &sn) ||
        sn != 32 || !HMAC(EVP_sha256(), secret, sizeof secret, (const unsigned char *)tok, (size_t)(dot - tok), mac, &mn) ||
        CRYPTO_memcmp(mac, sig, 32) != 0 || !b64_decode(tok, (size_t)(dot - tok), raw, &rn))
        return REFUSED;
    json_t *j = json_loadb((const char *)raw, rn, JSON_REJECT_DUPLICATES, NULL);
    const char *a = json_string_value(json_object_get(j, "a"));
    const char *sb = json_string_value(json_object_get(j, "s"));
    const char *n = json_string_value(json_object_get(j, "n"));
    json_t *exp = json_object_get(j, "exp");
    verdict v = REFUSED;
    if (json_is_object(j) && json_object_size(j) == 4 && a && (!strcmp(a, "abort") || !strcmp(a, "destroy")) &&
        sb && name_ok(sb) && n && nonce_ok(n) && json_is_integer(exp) && now < json_integer_value(exp) &&
        json_integer_value(exp) - now <= SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S) {
        snprintf(c->action, sizeof c->action, "%s", a);
        snprintf(c->sandbox, sizeof c->sandbox, "%s", sb);
        snprintf(c->nonce, sizeof c->nonce, "%s", n);
        c->exp = json_integer_value(exp);
        v = ACCEPTED;
    }
    json_decref(j);
    return v;
}

static void differential_action(const char *tok)
{
    sg_token_claims got, want;
    memset(&want, 0, sizeof want);
    sg_err err;
    int64_t now = NOW;
    verdict v = reference_action(tok, now, &want);
    int rc = sg_token_verify_action(secret, tok, now, &got, &err);
    if ((rc == 0) != (v == ACCEPTED))
        abort();
    if (rc == 0 && (strcmp(got.action, want.action) || strcmp(got.sandbox, want.sandbox) ||
                    strcmp(got.nonce, want.nonce) || got.exp != want.exp))
        abort();
}

/* An accepted operator write token is no other kind and holds sane claims. */
static void exclusive_op(const char *tok)
{
    sg_token_claims got, other;
    sg_err err;
    if (sg_token_verify_op(secret, tok, NOW, &got, &err) != 0)
        return;
    if (sg_token_verify(secret, tok, NOW, &other, &err) == 0 ||
        sg_token_verify_read(secret, tok, NOW, &other, &err) == 0 ||
        sg_token_verify_action(secret, tok, NOW, &other, &err) == 0)
        abort();
    if ((strcmp(got.op, "import") && strcmp(got.op, "purge")) || strlen(got.nonce) != SG_TOKEN_NONCE_LEN ||
        got.exp <= NOW || got.exp - NOW > SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S)
        abort();
}

static void differential(const char *tok)
{
    differential_action(tok);
    exclusive_op(tok);
    for (int read = 0; read < 2; read++) {
        sg_token_claims got, want;
        memset(&want, 0, sizeof want);
        sg_err err;
        verdict v = reference(tok, NOW, read, &want);
        int rc = read ? sg_token_verify_read(secret, tok, NOW, &got, &err)
                      : sg_token_verify(secret, tok, NOW, &got, &err);
        if ((rc == 0) != (v == ACCEPTED))
            abort();
        if (rc == 0 && (strcmp(got.learner, want.learner) || strcmp(got.task, want.task) ||
                        strcmp(got.sandbox, want.sandbox) || got.exp != want.exp ||
                        got.read != want.read))
            abort();
    }
}

/* Signs body bytes as the claims of a token. */
static char *sign(const unsigned char *claims, size_t n)
{
    char *body = b64_encode(claims, n);
    unsigned char mac[32];
    unsigned int mn = 0;
    if (!HMAC(EVP_sha256(), secret, sizeof secret, (const unsigned char *)body, strlen(body), mac, &mn))
        abort();
    char *sig = b64_encode(mac, 32);
    char *tok = malloc(strlen(body) + strlen(sig) + 2);
    sprintf(tok, "%s.%s", body, sig);
    free(body);
    free(sig);
    return tok;
}

static bool verifies(const char *tok, int64_t now)
{
    sg_token_claims c;
    sg_err err;
    return sg_token_verify(secret, tok, now, &c, &err) == 0;
}

/* Made by the signer: verifies while valid, and no mutation of it does. */
static void round_trip(const uint8_t *data, size_t size)
{
    char names[3][SG_NAME_MAX + 2] = {"l", "t", "s"};
    size_t k = 0, o = 0;
    for (size_t i = 0; i < size && k < 3; i++) {
        if (data[i] == '|') {
            names[k][o] = '\0';
            k++, o = 0;
        } else if (o < SG_NAME_MAX + 1) {
            names[k][o++] = (char)data[i];
            names[k][o] = '\0';
        }
    }
    sg_err err;
    int64_t exp = NOW + 1 + (size ? data[size - 1] : 0);
    char *tok = sg_token_make_exp(secret, names[0], names[1], names[2], exp, &err);
    if (!tok) {
        if (name_ok(names[0]) && name_ok(names[1]) && name_ok(names[2]))
            abort(); /* refused valid names */
        return;
    }
    if (!name_ok(names[0]) || !name_ok(names[1]) || !name_ok(names[2]))
        abort(); /* signed invalid names */
    sg_token_claims c;
    if (sg_token_verify(secret, tok, exp - 1, &c, &err) != 0 || strcmp(c.learner, names[0]) ||
        strcmp(c.task, names[1]) || strcmp(c.sandbox, names[2]) || c.exp != exp)
        abort();
    if (verifies(tok, exp) || verifies(tok, INT64_MAX))
        abort(); /* expired */
    if (sg_token_verify_read(secret, tok, exp - 1, &c, &err) == 0)
        abort(); /* a stream token read */
    uint8_t other[SG_TOKEN_SECRET_LEN];
    memcpy(other, secret, sizeof other);
    other[size % sizeof other] ^= (uint8_t)(1u << (size % 8));
    if (sg_token_verify(other, tok, exp - 1, &c, &err) == 0)
        abort(); /* another secret */
    size_t n = strlen(tok);
    for (size_t m = 0; m < 4 && size; m++) {
        size_t pos = (data[m % size] * 131u + m * 977u + size) % n;
        uint8_t x = (uint8_t)(data[(m + 1) % size] | 1u << m);
        char saved = tok[pos];
        tok[pos] = (char)(saved ^ x);
        if (verifies(tok, exp - 1))
            abort(); /* a changed byte */
        tok[pos] = saved;
    }
    char *longer = malloc(n + 2);
    memcpy(longer, tok, n);
    memcpy(longer + n, "A", 2);
    if (verifies(longer, exp - 1))
        abort(); /* extended */
    free(longer);
    tok[n - 1] = '\0';
    if (verifies(tok, exp - 1))
        abort(); /* cut short */
    free(tok);
    /* A read token for the same names (some left out: unscoped). */
    const char *scope[3];
    for (int i = 0; i < 3; i++)
        scope[i] = size && (data[0] >> i) & 1 ? "" : names[i];
    char *rt = sg_token_make_read(secret, scope[0], scope[1], scope[2], 60, &err);
    int64_t now = (int64_t)time(NULL);
    if (!rt || verifies(rt, now) || sg_token_verify_read(secret, rt, now, &c, &err) != 0 ||
        !c.read || strcmp(c.learner, scope[0]) || strcmp(c.task, scope[1]) ||
        strcmp(c.sandbox, scope[2]))
        abort(); /* a read token streams, or lost its scope */
    free(rt);
    /* An action token on the sandbox's name: that action, no other kind. */
    char *at = sg_token_make_action_exp(secret, size && data[0] & 1 ? "destroy" : "abort", names[2],
                                        "0123456789abcdef0123456789abcdef", exp, &err);
    if (!at)
        return; /* an invalid name: refused above already (stream token) */
    if (sg_token_verify_action(secret, at, exp - 1, &c, &err) != 0 || strcmp(c.sandbox, names[2]) ||
        strcmp(c.action, size && data[0] & 1 ? "destroy" : "abort") || verifies(at, exp - 1) ||
        sg_token_verify_read(secret, at, exp - 1, &c, &err) == 0 || sg_token_verify_action(secret, at, exp, &c, &err) == 0)
        abort(); /* an action token lost its claims, passed for another kind, or outlived exp */
    free(at);
    const char *op = size && data[0] & 2 ? "purge" : "import";
    char *ot = sg_token_make_op_exp(secret, op, "0123456789abcdef0123456789abcdef", exp, &err);
    if (!ot || sg_token_verify_op(secret, ot, exp - 1, &c, &err) != 0 || strcmp(c.op, op) || verifies(ot, exp - 1) ||
        sg_token_verify_read(secret, ot, exp - 1, &c, &err) == 0 ||
        sg_token_verify_action(secret, ot, exp - 1, &c, &err) == 0 ||
        sg_token_verify_op(secret, ot, exp, &c, &err) == 0)
        abort(); /* an operator write token lost its op, passed for another kind, or outlived exp */
    free(ot);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4 * SG_TOKEN_MAX)
        return 0;
    char *tok = malloc(size + 1);
    memcpy(tok, data, size);
    tok[size] = '\0';
    differential(tok);
    free(tok);
    tok = sign(data, size);
    differential(tok);
    free(tok);
    round_trip(data, size);
    return 0;
}
