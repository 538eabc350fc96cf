// A program that uses nothing: harness/CMakeLists.txt links one harness folder's library into it
// whole (every object, not only the ones a caller needs) with nothing but the libraries that folder
// declares below it, so any reference against the order inside harness/ is an undefined symbol.
int main() {
  return 0;
}
