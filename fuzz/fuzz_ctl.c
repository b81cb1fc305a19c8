/* Fuzzes the supervisor's control-request parser: any bytes a local client
 * may send as a REQ message, through the same calls the supervisor makes. */
#include <stddef.h>
#include <stdint.h>

#include "ctl.h"
#include "jsonutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_err err = {0};
    const char *op = NULL;
    json_t *req = sg_ctl_parse_req((const char *)data, size, &op, &err);
    if (!req)
        return 0;
    sg_exec_req r;
    if (sg_exec_req_parse(req, &r, &err) == 0)
        sg_exec_req_free(&r);
    json_decref(req);
    return 0;
}
