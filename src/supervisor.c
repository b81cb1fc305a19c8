/* supervisor: not written yet. */
