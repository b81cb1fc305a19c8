/* cleanup: __attribute__((cleanup)) helpers instead of goto chains.
 *
 *   sg_autofree char *s = strdup(x);   freed at scope exit
 *   sg_autoclose int fd = -1;          closed at scope exit if >= 0
 *   return sg_steal_ptr(&s);           hand ownership to the caller
 */
#ifndef SG_CLEANUP_H
#define SG_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void sg_freep(void *p)
{
    free(*(void **)p);
}

static inline void sg_closep(const int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

/* Closes *fd if open and marks it closed (-1): for fds kept in structs. */
static inline void sg_close_reset(int *fd)
{
    sg_closep(fd);
    *fd = -1;
}

static inline void sg_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

static inline void sg_closedirp(DIR **d)
{
    if (*d)
        closedir(*d);
}

/* Frees a NULL-terminated array of strings and the array itself. */
static inline void sg_strvfreep(char ***v)
{
    if (!*v)
        return;
    for (char **p = *v; *p; p++)
        free(*p);
    free(*v);
}

#define sg_autofree __attribute__((cleanup(sg_freep)))
#define sg_autoclose __attribute__((cleanup(sg_closep)))
#define sg_autofclose __attribute__((cleanup(sg_fclosep)))
#define sg_autoclosedir __attribute__((cleanup(sg_closedirp)))
#define sg_autostrv __attribute__((cleanup(sg_strvfreep)))

static inline void *sg_steal_ptr(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}

static inline int sg_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

#define SG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Exchanges two pointers of the same type (the old one is then freed with
 * its new owner). */
#define SG_SWAP_PTR(a, b) do { __typeof__(a) sg_swap_tmp_ = (a); (a) = (b); (b) = sg_swap_tmp_; } while (0)

#endif
