/* cmd_token: not written yet. */
