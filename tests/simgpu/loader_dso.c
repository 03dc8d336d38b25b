/* A shared library that simgpu_nccl's "loader" check loads and unloads in a loop: each dlopen
 * maps it anew and adds it to the dynamic loader's list, as a framework loading cuDNN does. */
int simgpu_loader_dso_value(void) { return 42; }
