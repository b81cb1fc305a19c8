/* capmod: the capture as a module loaded on demand (see capmod.h). */
#include "capture/capture_module.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>

#include "base/util.h"

#define SG_CAPTURE_MODULE "sandglass-capture.so"

const sg_capture_api *sg_capture_module_load(sg_err *err)
{
    static const sg_capture_api *api;
    if (api)
        return api;
    char path[PATH_MAX];
    if (sg_sibling_exe("SANDGLASS_CAPTURE_MODULE", SG_CAPTURE_MODULE, path, sizeof path) < 0) {
        sg_err_set(err, ENOENT, "the capture module %s is not next to the supervisor", SG_CAPTURE_MODULE);
        return NULL;
    }
    /* RTLD_LOCAL: its copies of our base modules stay its own. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        sg_err_set(err, ENOEXEC, "cannot load the capture module: %s", why ? why : "?");
        return NULL;
    }
    api = dlsym(h, SG_CAPTURE_API_SYMBOL);
    if (!api) {
        sg_err_set(err, ENOEXEC, "the capture module %s has no %s", path, SG_CAPTURE_API_SYMBOL);
        dlclose(h);
        return NULL;
    }
    return api;
}
