/* Linked directly against the build tree's liblimiter (-L build -llimiter):
 * starts only if the loader finds the library's soname in build/. Records
 * one allocation for this process and prints the verdict. */
#include "limiter.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  MemoryOpRecord r;
  memset(&r, 0, sizeof r);
  snprintf(r.deviceUUID, sizeof r.deviceUUID, "stub-device-0");
  r.bytesDiff = 4096;
  Result rc = CheckAndRecordMemoryOps(pid, "stub-device-0", 4096, &r);
  printf("limiter rc=%d block=%d\n", (int)rc, (int)r.shouldBlock);
  return rc == RESULT_SUCCESS && !r.shouldBlock ? 0 : 1;
}
