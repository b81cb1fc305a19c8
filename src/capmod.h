/* capmod: loads the capture (capture.h) as a shared module,
 * sandglass-capture.so, when a sandbox first needs it.
 *
 * Why: the capture's uplink is libwebsockets, which brings OpenSSL; mapped
 * into every supervisor they cost ~2 MiB resident each, and a sandbox
 * without a task never captures. The module sits next to the supervisor
 * binary ($SANDGLASS_CAPTURE_MODULE overrides) and is never unloaded. */
#ifndef SG_CAPMOD_H
#define SG_CAPMOD_H

#include "capture.h"
#include "err.h"

/* The capture's entry points (loaded once per process), or NULL with err. */
const sg_capture_api *sg_capmod_load(sg_err *err);

#endif
