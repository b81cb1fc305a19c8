/* watch: not written yet. */
