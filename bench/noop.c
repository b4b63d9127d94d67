/* The cheapest process this machine can run: linked statically (no dynamic loader), it
 * returns at once. bench/run builds it for the runtime figure's process floor. */
int main(void) { return 0; }
