/* Linked directly (not dlopen) against one build-tree libaccelerator: prints
 * the vendor the loader gave it and its device count, through both ABIs'
 * entry points. c-tests/link/test_link.sh builds it every way a consumer
 * links and checks the vendor. */
#include <stddef.h>
#include <stdio.h>

/* Declared here rather than through a header: v1 and v2 headers cannot be
 * included together, and this program uses one function of each. */
const char *acceleratorVendorName(void);
int AccelInit(void);
int AccelGetDeviceCount(size_t *deviceCount);

int main(void) {
  size_t n = 0;
  int rc = AccelInit();
  if (rc == 0)
    rc = AccelGetDeviceCount(&n);
  printf("vendor=%s devices=%zu rc=%d\n", acceleratorVendorName(), n, rc);
  return rc;
}
