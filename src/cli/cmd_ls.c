/* cmd_ls: not written yet. */
