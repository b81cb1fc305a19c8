/* token: HMAC-SHA256 handshake tokens and the ingest secret (see token.h). */
#include "wire/token.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/digest.h"
#include "base/json.h"
#include "base/util.h"

#define SECRET_FILE_MAX 256

static const char b64url_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding; caller frees. */
static char *b64url_encode(const unsigned char *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64url_chars[(v >> 18) & 63];
        out[o++] = b64url_chars[(v >> 12) & 63];
        if (i + 1 < len)
            out[o++] = b64url_chars[(v >> 6) & 63];
        if (i + 2 < len)
            out[o++] = b64url_chars[v & 63];
    }
    out[o] = '\0';
    return out;
}

static int b64url_val(char c)
{
    const char *p = c ? strchr(b64url_chars, c) : NULL;
    return p ? (int)(p - b64url_chars) : -1;
}

/* Strict decode (no padding, no stray bits); -1 on bad input. out holds len*3/4. */
static int b64url_decode(const char *in, size_t len, unsigned char *out, size_t *out_len)
{
    if (len % 4 == 1)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        size_t n = len - i < 4 ? len - i : 4;
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = 0;
            if (j < n && (d = b64url_val(in[i + j])) < 0)
                return -1;
            v = (v << 6) | (uint32_t)d;
        }
        out[o++] = (unsigned char)(v >> 16);
        if (n > 2)
            out[o++] = (unsigned char)(v >> 8);
        if (n > 3)
            out[o++] = (unsigned char)v;
        /* Non-canonical trailing bits would let two strings decode the same. */
        if ((n == 2 && (v & 0xFFFF)) || (n == 3 && (v & 0xFF)))
            return -1;
    }
    *out_len = o;
    return 0;
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sg_token_secret_load(const char *path, uint8_t secret[SG_TOKEN_SECRET_LEN], sg_err *err)
{
    sg_autoclose int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sg_err_sys(err, "secret file %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sg_err_sys(err, "stat %s", path);
    if (!S_ISREG(st.st_mode))
        return sg_err_set(err, EINVAL, "secret file %s is not a regular file", path);
    if (st.st_mode & 077)
        return sg_err_set(err, EPERM,
                          "secret file %s is accessible by group or others (mode %04o); "
                          "it must be mode 0600 (chmod 600 %s)",
                          path, (unsigned)(st.st_mode & 07777), path);
    char buf[SECRET_FILE_MAX];
    ssize_t got = sg_read_all(fd, buf, sizeof buf);
    if (got < 0)
        return sg_err_sys(err, "read %s", path);
    if ((size_t)got == sizeof buf)
        return sg_err_set(err, EINVAL, "secret file %s is too large", path);
    size_t have = (size_t)got;
    while (have > 0 && (buf[have - 1] == '\n' || buf[have - 1] == '\r' || buf[have - 1] == ' '))
        have--;
    if (have != SG_TOKEN_SECRET_LEN * 2)
        return sg_err_set(err, EINVAL, "secret file %s: expected %d hex characters, found %zu",
                          path, SG_TOKEN_SECRET_LEN * 2, have);
    for (size_t i = 0; i < SG_TOKEN_SECRET_LEN; i++) {
        int hi = hex_val(buf[2 * i]), lo = hex_val(buf[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            OPENSSL_cleanse(buf, sizeof buf);
            return sg_err_set(err, EINVAL, "secret file %s: not hex", path);
        }
        secret[i] = (uint8_t)(hi << 4 | lo);
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

int sg_token_secret_ensure(const char *path, uint8_t secret[SG_TOKEN_SECRET_LEN], sg_err *err)
{
    if (access(path, F_OK) == 0 || errno != ENOENT)
        return sg_token_secret_load(path, secret, err);

    sg_autofree char *dircopy = strdup(path);
    if (!dircopy)
        return sg_err_set(err, ENOMEM, "out of memory");
    if (sg_mkdir_p(dirname(dircopy), 0700, err) < 0) {
        sg_err_prefix(err, "secret directory");
        return -1;
    }
    uint8_t raw[SG_TOKEN_SECRET_LEN];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return sg_err_sys(err, "getrandom");
    char hex[SG_TOKEN_SECRET_LEN * 2 + 2];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[SG_TOKEN_SECRET_LEN * 2] = '\n';
    OPENSSL_cleanse(raw, sizeof raw);

    /* Write a temp file, then link() it into place: link fails if someone
     * else made the secret meanwhile, and readers never see a partial file. */
    sg_autofree char *tmp = sg_strdup_printf("%s.tmp.%d", path, (int)getpid());
    {
        sg_autoclose int fd =
            open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return sg_err_sys(err, "create %s", tmp);
        if (sg_write_all(fd, hex, SG_TOKEN_SECRET_LEN * 2 + 1) < 0 || fsync(fd) < 0) {
            sg_err_sys(err, "write %s", tmp);
            unlink(tmp);
            return -1;
        }
    }
    OPENSSL_cleanse(hex, sizeof hex);
    int r = link(tmp, path);
    int saved = errno;
    unlink(tmp);
    if (r < 0 && saved != EEXIST) {
        errno = saved;
        return sg_err_sys(err, "create %s", path);
    }
    return sg_token_secret_load(path, secret, err);
}

/* HMAC-SHA256 from libcrypto: only processes that load it anyway make or
 * check tokens. Fails only if OpenSSL cannot (no provider, out of memory). */
static int mac_of(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *data, size_t len,
                  unsigned char mac[32], sg_err *err)
{
    unsigned int n = 0;
    if (!HMAC(EVP_sha256(), secret, SG_TOKEN_SECRET_LEN, (const unsigned char *)data, len, mac,
              &n) ||
        n != 32)
        return sg_err_set(err, EIO, "HMAC-SHA256 failed (OpenSSL)");
    return 0;
}

/* Signs claims; caller frees. */
static char *sign_claims(const uint8_t secret[SG_TOKEN_SECRET_LEN], json_t *claims, sg_err *err)
{
    sg_autofree char *text = claims ? json_dumps(claims, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sg_autofree char *body = text ? b64url_encode((unsigned char *)text, strlen(text)) : NULL;
    if (!body) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    unsigned char mac[32];
    if (mac_of(secret, body, strlen(body), mac, err) < 0)
        return NULL;
    sg_autofree char *sig = b64url_encode(mac, sizeof mac);
    if (!sig) {
        sg_err_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    return sg_strdup_printf("%s.%s", body, sig);
}

char *sg_token_make_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                        const char *task, const char *sandbox, int64_t exp, sg_err *err)
{
    if (!sg_valid_name(learner) || !sg_valid_name(task) || !sg_valid_name(sandbox)) {
        sg_err_set(err, EINVAL, "invalid learner, task or sandbox name");
        return NULL;
    }
    sg_autojson json_t *claims = json_pack("{s:s, s:s, s:s, s:I}", "l", learner, "t", task,
                                           "s", sandbox, "exp", (json_int_t)exp);
    return sign_claims(secret, claims, err);
}

char *sg_token_make_read(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                         const char *task, const char *sandbox, int64_t ttl_s, sg_err *err)
{
    if (ttl_s <= 0 || ttl_s > SG_TOKEN_TTL_MAX) {
        sg_err_set(err, EINVAL, "token ttl must be in 1..%lld seconds", SG_TOKEN_TTL_MAX);
        return NULL;
    }
    sg_autojson json_t *claims =
        json_pack("{s:i, s:I}", "r", 1, "exp", (json_int_t)((int64_t)time(NULL) + ttl_s));
    const char *keys[] = {"l", "t", "s"}, *vals[] = {learner, task, sandbox};
    for (size_t i = 0; claims && i < SG_ARRAY_LEN(keys); i++) {
        if (!vals[i] || !*vals[i])
            continue;
        if (!sg_valid_name(vals[i])) {
            sg_err_set(err, EINVAL, "invalid learner, task or sandbox name");
            return NULL;
        }
        json_object_set_new(claims, keys[i], json_string(vals[i]));
    }
    return sign_claims(secret, claims, err);
}

/* A token of one sandbox with the claim "x": x (1 terminal, 2 watch: a
 * verifier that predates watch tokens refuses 2 as malformed instead of
 * taking it for another kind). */
static char *make_sandbox_token(const uint8_t secret[SG_TOKEN_SECRET_LEN], int x, const char *learner,
                                const char *task, const char *sandbox, int64_t ttl_s, sg_err *err)
{
    if (ttl_s <= 0 || ttl_s > SG_TOKEN_TTL_MAX) {
        sg_err_set(err, EINVAL, "token ttl must be in 1..%lld seconds", SG_TOKEN_TTL_MAX);
        return NULL;
    }
    if (!sg_valid_name(learner) || !sg_valid_name(task) || !sg_valid_name(sandbox)) {
        sg_err_set(err, EINVAL, "invalid learner, task or sandbox name");
        return NULL;
    }
    sg_autojson json_t *claims = json_pack("{s:i, s:s, s:s, s:s, s:I}", "x", x, "l", learner,
        "t", task, "s", sandbox, "exp", (json_int_t)((int64_t)time(NULL) + ttl_s));
    return sign_claims(secret, claims, err);
}

char *sg_token_make_terminal(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                             const char *task, const char *sandbox, int64_t ttl_s, sg_err *err)
{
    return make_sandbox_token(secret, 1, learner, task, sandbox, ttl_s, err);
}

char *sg_token_make_watch(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                          const char *task, const char *sandbox, int64_t ttl_s, sg_err *err)
{
    return make_sandbox_token(secret, 2, learner, task, sandbox, ttl_s, err);
}

char *sg_token_make(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                    const char *task, const char *sandbox, int64_t ttl_s, sg_err *err)
{
    if (ttl_s <= 0 || ttl_s > SG_TOKEN_TTL_MAX) {
        sg_err_set(err, EINVAL, "token ttl must be in 1..%lld seconds", SG_TOKEN_TTL_MAX);
        return NULL;
    }
    return sg_token_make_exp(secret, learner, task, sandbox, (int64_t)time(NULL) + ttl_s, err);
}

void sg_token_id(const char *token, char out[SG_TOKEN_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t d[SG_SHA256_LEN];
    sg_sha256_buf(token, strlen(token), d);
    for (int i = 0; i < SG_TOKEN_ID_LEN / 2; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[SG_TOKEN_ID_LEN] = '\0';
}

bool sg_token_id_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= SG_TOKEN_ID_LEN || !((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == SG_TOKEN_ID_LEN;
}

char *sg_token_make_revoke(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *id, int64_t ttl_s,
                           sg_err *err)
{
    if (ttl_s <= 0 || ttl_s > SG_TOKEN_TTL_MAX || !sg_token_id_valid(id)) {
        sg_err_set(err, EINVAL, "a revoke token needs a token id (16 hex digits) and a ttl in 1..%lld s",
                   SG_TOKEN_TTL_MAX);
        return NULL;
    }
    sg_autojson json_t *claims =
        json_pack("{s:s, s:I}", "rv", id, "exp", (json_int_t)((int64_t)time(NULL) + ttl_s));
    return sign_claims(secret, claims, err);
}

char *sg_token_make_host_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *host, int64_t exp,
                             sg_err *err)
{
    if (!sg_valid_name(host)) {
        sg_err_set(err, EINVAL, "a host token needs a host name (letters, digits, '.', '_', '-', '@'; %d at most)",
                   SG_NAME_MAX);
        return NULL;
    }
    sg_autojson json_t *claims = json_pack("{s:s, s:I}", "h", host, "exp", (json_int_t)exp);
    return sign_claims(secret, claims, err);
}

char *sg_token_make_host(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *host, int64_t ttl_s, sg_err *err)
{
    if (ttl_s <= 0 || ttl_s > SG_TOKEN_TTL_MAX) {
        sg_err_set(err, EINVAL, "token ttl must be in 1..%lld seconds", SG_TOKEN_TTL_MAX);
        return NULL;
    }
    return sg_token_make_host_exp(secret, host, (int64_t)time(NULL) + ttl_s, err);
}

static bool nonce_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= SG_TOKEN_NONCE_LEN || !((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == SG_TOKEN_NONCE_LEN;
}

static bool action_valid(const char *a)
{
    return a && (strcmp(a, "abort") == 0 || strcmp(a, "destroy") == 0);
}

char *sg_token_make_action_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *action, const char *sandbox,
                               const char *nonce, int64_t exp, sg_err *err)
{
    if (!action_valid(action) || !sg_valid_name(sandbox) || !nonce_valid(nonce)) {
        sg_err_set(err, EINVAL, "an action token needs abort or destroy, a sandbox id and a nonce");
        return NULL;
    }
    sg_autojson json_t *claims =
        json_pack("{s:s, s:s, s:s, s:I}", "a", action, "s", sandbox, "n", nonce, "exp", (json_int_t)exp);
    return sign_claims(secret, claims, err);
}

/* SG_TOKEN_NONCE_LEN random hex digits. */
static int random_nonce(char nonce[SG_TOKEN_NONCE_LEN + 1], sg_err *err)
{
    uint8_t raw[SG_TOKEN_NONCE_LEN / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return sg_err_sys(err, "getrandom");
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(nonce + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

char *sg_token_make_action(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *action, const char *sandbox,
                           sg_err *err)
{
    char nonce[SG_TOKEN_NONCE_LEN + 1];
    if (random_nonce(nonce, err) < 0)
        return NULL;
    return sg_token_make_action_exp(secret, action, sandbox, nonce, (int64_t)time(NULL) + SG_TOKEN_ACTION_TTL_S,
                                    err);
}

static bool op_valid(const char *o)
{
    return o && (strcmp(o, "import") == 0 || strcmp(o, "purge") == 0);
}

char *sg_token_make_op_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *op, const char *nonce, int64_t exp,
                           sg_err *err)
{
    if (!op_valid(op) || !nonce_valid(nonce)) {
        sg_err_set(err, EINVAL, "an operator write token needs import or purge and a nonce");
        return NULL;
    }
    sg_autojson json_t *claims = json_pack("{s:s, s:s, s:I}", "o", op, "n", nonce, "exp", (json_int_t)exp);
    return sign_claims(secret, claims, err);
}

char *sg_token_make_op(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *op, sg_err *err)
{
    char nonce[SG_TOKEN_NONCE_LEN + 1];
    if (random_nonce(nonce, err) < 0)
        return NULL;
    return sg_token_make_op_exp(secret, op, nonce, (int64_t)time(NULL) + SG_TOKEN_ACTION_TTL_S, err);
}

static int copy_claim(json_t *claims, const char *key, char *dst, sg_err *err)
{
    const char *v = json_string_value(json_object_get(claims, key));
    if (!v || !sg_valid_name(v))
        return sg_err_set(err, EINVAL, "malformed token: claim '%s' missing or invalid", key);
    snprintf(dst, SG_NAME_MAX + 1, "%s", v);
    return 0;
}

typedef enum token_kind {
    KIND_STREAM,
    KIND_READ,
    KIND_TERMINAL,
    KIND_REVOKE,
    KIND_WATCH,
    KIND_HOST,
    KIND_ACTION,
    KIND_OP
} token_kind;

/* What a token of kind `have` may not do where `want` is required. */
static const char *wrong_kind(token_kind have, token_kind want)
{
    if (have == KIND_OP)
        return "an operator write token can only import or purge";
    if (want == KIND_OP)
        return "not an operator write token (make one from the ingest's secret)";
    if (have == KIND_ACTION)
        return "an action token can only abort or destroy its sandbox through serve";
    if (want == KIND_ACTION)
        return "not an action token";
    if (have == KIND_HOST)
        return "a host token can only register its host";
    if (want == KIND_HOST)
        return "not a host token";
    if (have == KIND_REVOKE)
        return "a revoke token can only revoke";
    if (want == KIND_REVOKE)
        return "not a revoke token";
    if (have == KIND_WATCH)
        return "a watch token can only watch a terminal";
    if (want == KIND_WATCH)
        return "not a watch token";
    static const char *const msg[3][3] = {
        [KIND_STREAM] = {[KIND_READ] = "a stream token cannot read (use a read token)",
                         [KIND_TERMINAL] = "a stream token cannot open a terminal (use a terminal token)"},
        [KIND_READ] = {[KIND_STREAM] = "a read token cannot stream events",
                       [KIND_TERMINAL] = "a read token cannot open a terminal (use a terminal token)"},
        [KIND_TERMINAL] = {[KIND_STREAM] = "a terminal token cannot stream events",
                           [KIND_READ] = "a terminal token cannot read (use a read token)"},
    };
    return msg[have][want];
}

/* Expired, or valid further ahead than a short-lived kind may be. */
static int short_lived(int64_t now, int64_t exp, const char *kind, sg_err *err)
{
    if (now >= exp)
        return sg_err_set(err, EACCES, "token expired");
    if (exp - now > SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S)
        return sg_err_set(err, EACCES, "%s token lives too long (%d s at most)", kind, SG_TOKEN_ACTION_TTL_S);
    return 0;
}

/* An action token's claims (a: its "a"), checked whole: out filled, or
 * -1 with err. Only "a", "s", "n" and "exp": a claim of another kind
 * beside them is malformed, not a token of two kinds. */
static int action_claims(json_t *claims, json_t *a, int64_t now, sg_token_claims *out, sg_err *err)
{
    const char *s = json_string_value(json_object_get(claims, "s"));
    const char *n = json_string_value(json_object_get(claims, "n"));
    if (json_object_size(claims) != 4 || !action_valid(json_string_value(a)))
        return sg_err_set(err, EINVAL, "malformed token: claim 'a' invalid");
    if (!s || !sg_valid_name(s))
        return sg_err_set(err, EINVAL, "malformed token: claim 's' missing or invalid");
    if (!n || !nonce_valid(n))
        return sg_err_set(err, EINVAL, "malformed token: claim 'n' missing or invalid");
    snprintf(out->action, sizeof out->action, "%s", json_string_value(a));
    snprintf(out->sandbox, sizeof out->sandbox, "%s", s);
    snprintf(out->nonce, sizeof out->nonce, "%s", n);
    return short_lived(now, out->exp, "action", err);
}

/* An operator write token's claims (o: its "o"): only "o", "n", "exp". */
static int op_claims(json_t *claims, json_t *o, int64_t now, sg_token_claims *out, sg_err *err)
{
    const char *n = json_string_value(json_object_get(claims, "n"));
    if (json_object_size(claims) != 3 || !op_valid(json_string_value(o)))
        return sg_err_set(err, EINVAL, "malformed token: claim 'o' invalid");
    if (!n || !nonce_valid(n))
        return sg_err_set(err, EINVAL, "malformed token: claim 'n' missing or invalid");
    snprintf(out->op, sizeof out->op, "%s", json_string_value(o));
    snprintf(out->nonce, sizeof out->nonce, "%s", n);
    return short_lived(now, out->exp, "operator write", err);
}

/* Signature, then claims, then expiry; want: which kind is wanted. */
static int verify_kind(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                       int64_t now, token_kind want, sg_token_claims *out, sg_err *err)
{
    memset(out, 0, sizeof *out);
    if (!token || !*token)
        return sg_err_set(err, EINVAL, "malformed token: empty");
    size_t len = strnlen(token, SG_TOKEN_MAX + 1);
    if (len > SG_TOKEN_MAX)
        return sg_err_set(err, EINVAL, "malformed token: longer than %d bytes", SG_TOKEN_MAX);
    const char *dot = memchr(token, '.', len);
    if (!dot || memchr(dot + 1, '.', len - (size_t)(dot + 1 - token)))
        return sg_err_set(err, EINVAL, "malformed token: expected <claims>.<signature>");
    size_t body_len = (size_t)(dot - token), sig_len = len - body_len - 1;

    unsigned char sig[SG_TOKEN_MAX];
    size_t sig_n = 0;
    if (b64url_decode(dot + 1, sig_len, sig, &sig_n) < 0 || sig_n != 32)
        return sg_err_set(err, EINVAL, "malformed token: bad signature encoding");
    /* Signature before parsing: nothing unauthenticated reaches the JSON parser. */
    unsigned char mac[32];
    if (mac_of(secret, token, body_len, mac, err) < 0)
        return -1;
    if (CRYPTO_memcmp(mac, sig, 32) != 0)
        return sg_err_set(err, EACCES, "bad signature");

    unsigned char claims_raw[SG_TOKEN_MAX];
    size_t claims_n = 0;
    if (b64url_decode(token, body_len, claims_raw, &claims_n) < 0)
        return sg_err_set(err, EINVAL, "malformed token: bad claims encoding");
    sg_err jerr;
    sg_autojson json_t *claims = sg_json_parse((char *)claims_raw, claims_n, &jerr);
    if (!json_is_object(claims))
        return sg_err_set(err, EINVAL, "malformed token: claims are not a JSON object");
    json_t *exp = json_object_get(claims, "exp");
    if (!json_is_integer(exp))
        return sg_err_set(err, EINVAL, "malformed token: claim 'exp' missing or invalid");
    json_t *r = json_object_get(claims, "r"), *x = json_object_get(claims, "x");
    json_t *rv = json_object_get(claims, "rv"), *h = json_object_get(claims, "h");
    json_t *a = json_object_get(claims, "a"), *o = json_object_get(claims, "o");
    bool is_read = r != NULL;
    if (o && (a || r || x || rv || h))
        return sg_err_set(err, EINVAL, "malformed token: claim 'o' invalid");
    if (a && (r || x || rv || h))
        return sg_err_set(err, EINVAL, "malformed token: claim 'a' invalid");
    if (h && (r || x || rv || !json_is_string(h) || !sg_valid_name(json_string_value(h))))
        return sg_err_set(err, EINVAL, "malformed token: claim 'h' invalid");
    if (rv && (r || x || !json_is_string(rv) || !sg_token_id_valid(json_string_value(rv))))
        return sg_err_set(err, EINVAL, "malformed token: claim 'rv' invalid");
    if (is_read && !(json_is_integer(r) && json_integer_value(r) == 1))
        return sg_err_set(err, EINVAL, "malformed token: claim 'r' invalid");
    if (x && !(json_is_integer(x) && (json_integer_value(x) == 1 || json_integer_value(x) == 2)))
        return sg_err_set(err, EINVAL, "malformed token: claim 'x' invalid");
    if (x && is_read)
        return sg_err_set(err, EINVAL, "malformed token: both 'r' and 'x'");
    token_kind have = o ? KIND_OP
        : a             ? KIND_ACTION
        : h             ? KIND_HOST
        : rv            ? KIND_REVOKE
        : is_read       ? KIND_READ
        : x             ? (json_integer_value(x) == 2 ? KIND_WATCH : KIND_TERMINAL)
                        : KIND_STREAM;
    if (have != want)
        return sg_err_set(err, EACCES, "%s", wrong_kind(have, want));
    sg_token_id(token, out->id);
    out->exp = json_integer_value(exp);
    if (o)
        return op_claims(claims, o, now, out, err);
    if (a)
        return action_claims(claims, a, now, out, err);
    if (rv || h) {
        if (rv)
            snprintf(out->revoke, sizeof out->revoke, "%s", json_string_value(rv));
        else
            snprintf(out->host, sizeof out->host, "%s", json_string_value(h));
        return now >= out->exp ? sg_err_set(err, EACCES, "token expired") : 0;
    }
    out->read = is_read;
    out->terminal = have == KIND_TERMINAL;
    out->watch = have == KIND_WATCH;
    const char *keys[] = {"l", "t", "s"};
    char *dst[] = {out->learner, out->task, out->sandbox};
    for (size_t i = 0; i < SG_ARRAY_LEN(keys); i++) {
        if (is_read && !json_object_get(claims, keys[i]))
            continue; /* unscoped */
        if (copy_claim(claims, keys[i], dst[i], err) < 0)
            return -1;
    }
    out->exp = json_integer_value(exp);
    if (now >= out->exp)
        return sg_err_set(err, EACCES, "token expired");
    return 0;
}

int sg_token_verify(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                    int64_t now, sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_STREAM, out, err);
}

int sg_token_verify_terminal(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                             int64_t now, sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_TERMINAL, out, err);
}

int sg_token_verify_revoke(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                           int64_t now, sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_REVOKE, out, err);
}

int sg_token_verify_read(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                         int64_t now, sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_READ, out, err);
}

int sg_token_verify_watch(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                          int64_t now, sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_WATCH, out, err);
}

int sg_token_verify_host(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now,
                         sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_HOST, out, err);
}

int sg_token_verify_action(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now,
                           sg_token_claims *out, sg_err *err)
{
    return verify_kind(secret, token, now, KIND_ACTION, out, err);
}

int sg_token_verify_op(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now, sg_token_claims *out,
                       sg_err *err)
{
    return verify_kind(secret, token, now, KIND_OP, out, err);
}

int sg_token_nonce_take(sg_token_nonces *s, const char *nonce, int64_t exp, int64_t now)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) /* the expired ones go */
        if (s->v[i].exp > now)
            s->v[k++] = s->v[i];
    s->n = k;
    for (size_t i = 0; i < k; i++)
        if (strcmp(s->v[i].nonce, nonce) == 0)
            return 1;
    if (k == SG_TOKEN_NONCES_MAX)
        return -1;
    snprintf(s->v[k].nonce, sizeof s->v[k].nonce, "%s", nonce);
    s->v[k].exp = exp;
    s->n++;
    return 0;
}
