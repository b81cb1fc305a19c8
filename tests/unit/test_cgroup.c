int main(void);
int main(void) { return 77; } /* placeholder: written by the cgroup module's author */
