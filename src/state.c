/* state: not written yet. */
