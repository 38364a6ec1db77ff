#include <cstdio>
int main() { std::puts("cmfx"); return 0; }
