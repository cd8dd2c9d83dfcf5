/* The semaphore-guarded USDT probe of cprog: sys/sdt.h writes a semaphore into the notes
 * of a whole translation unit when _SDT_HAS_SEMAPHORES is defined. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short cprog_request_semaphore __attribute__((unused)) __attribute__((section(".probes")));

void cprog_request(const char *path, int status)
{
	if (cprog_request_semaphore)
		STAP_PROBE2(cprog, request, path, status);
}
