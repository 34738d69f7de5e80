#include <cstdio>
int main() { std::puts("ferry: not built yet"); return 0; }
