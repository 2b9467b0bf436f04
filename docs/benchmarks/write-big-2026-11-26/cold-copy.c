// Cold-source page-cache copy: CRC of the whole 1 MiB then one pwritev, against CRC and pwrite per G-byte group.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/uio.h>
#include <time.h>
#include <nmmintrin.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec/1e9;}
static uint32_t crc(uint32_t c,const uint8_t*p,size_t n){uint64_t x=c;for(size_t i=0;i+8<=n;i+=8)x=_mm_crc32_u64(x,*(uint64_t*)(p+i));return (uint32_t)x;}
int main(int argc,char**argv){
  size_t rec=atol(argv[1]), grp=atol(argv[2]); int nrec=atoi(argv[3]); const char*path=argv[4];
  size_t piece=64<<10; int np=rec/piece; if(np<1){np=1;piece=rec;}
  uint8_t **bufs=malloc(sizeof(void*)*nrec*np);
  for(int i=0;i<nrec*np;i++){bufs[i]=malloc(piece);memset(bufs[i],i,piece);}
  size_t evn=64<<20; uint8_t*ev=malloc(evn); memset(ev,1,evn);
  int fd=open(path,O_CREAT|O_TRUNC|O_WRONLY,0644); off_t off=0; double tw=0; volatile uint32_t sink=0;
  for(int r=0;r<nrec;r++){
    for(size_t i=0;i<evn;i+=64)ev[i]++; // evict
    uint8_t**p=bufs+r*np; double t0=now();
    if(grp==0){ uint32_t c=0; for(int i=0;i<np;i++)c=crc(c,p[i],piece); sink+=c;
      struct iovec io[np]; for(int i=0;i<np;i++){io[i].iov_base=p[i];io[i].iov_len=piece;}
      pwritev(fd,io,np,off); off+=rec;
    } else { int per=grp/piece; if(per<1)per=1; uint32_t c=0;
      for(int i=0;i<np;i+=per){int k=np-i<per?np-i:per; struct iovec io[k];
        for(int j=0;j<k;j++){c=crc(c,p[i+j],piece);io[j].iov_base=p[i+j];io[j].iov_len=piece;}
        pwritev(fd,io,k,off); off+=k*piece;} sink+=c; }
    tw+=now()-t0;
  }
  printf("rec=%zu grp=%zu: %.1f us/rec\n",rec,grp,tw/nrec*1e6);
  close(fd); unlink(path); return 0;}
