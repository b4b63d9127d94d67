/* The sandbox ("pause") process of the containerd tests: holds the pod's namespaces and sleeps
 * until containerd stops the sandbox (SIGTERM) or someone interrupts it. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    for (;;)
        pause();
}
