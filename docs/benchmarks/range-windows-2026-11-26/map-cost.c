#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <nmmintrin.h>
static uint64_t crc(const uint8_t *p, size_t n){ uint64_t c=0; for(size_t i=0;i<n;i+=8) c=_mm_crc32_u64(c,*(const uint64_t*)(p+i)); return c;}
static double cpu(){ struct rusage r; getrusage(RUSAGE_SELF,&r); return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
static double wall(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  const char*path=argv[1]; size_t FILE_;  int mode=atoi(argv[2]); size_t win=(size_t)atol(argv[3])<<10; int reps=atoi(argv[4]);
  int fd=open(path,O_RDONLY); FILE_=lseek(fd,0,SEEK_END)/(1<<20)*(1<<20); uint8_t *buf=aligned_alloc(4096,win); memset(buf,0,win);
  volatile uint64_t sink=0; size_t mib=1<<20; size_t ck = win < mib ? win : mib;
  uint8_t *keep=NULL; if(mode==5){ keep=mmap(NULL,FILE_,PROT_READ,MAP_SHARED|MAP_POPULATE,fd,0);} 
  double c0=cpu(), w0=wall(); size_t bytes=0;
  for(int r=0;r<reps;r++) for(size_t off=(size_t)atol(argv[5]); off+win<=FILE_; off+=win){
    if(mode==0||mode==1){ uint8_t*m=mmap(NULL,win,PROT_READ,MAP_SHARED|(mode==0?MAP_POPULATE:0),fd,off); for(size_t i=0;i<win;i+=ck) sink+=crc(m+i,ck); munmap(m,win);} 
    else if(mode==2){ size_t done=0; while(done<win){ ssize_t n=pread(fd,buf+done,win-done,off+done); if(n<=0) return 1; done+=n;} for(size_t i=0;i<win;i+=ck) sink+=crc(buf+i,ck);} 
    else if(mode==3){ uint8_t*m=mmap(NULL,win,PROT_READ,MAP_SHARED,fd,off); madvise(m,win,MADV_POPULATE_READ); for(size_t i=0;i<win;i+=ck) sink+=crc(m+i,ck); munmap(m,win);} 
    else if(mode==4){ uint8_t*m=mmap(NULL,win,PROT_READ,MAP_SHARED,fd,off); madvise(m,win,MADV_SEQUENTIAL); for(size_t i=0;i<win;i+=ck) sink+=crc(m+i,ck); munmap(m,win);} 
    else if(mode==5){ for(size_t i=0;i<win;i+=ck) sink+=crc(keep+off+i,ck);} 
    else if(mode==6){ uint8_t*m=mmap(NULL,win,PROT_READ,MAP_SHARED|MAP_POPULATE,fd,off); munmap(m,win);} 
    else if(mode==7){ uint8_t*m=mmap(NULL,win,PROT_READ,MAP_SHARED,fd,off); for(size_t i=0;i<win;i+=4096) sink+=m[i]; munmap(m,win);} 
    bytes+=win; }
  double c1=cpu(), w1=wall();
  printf("mode %d win %zuK: cpu %.1f us/MiB wall %.1f us/MiB\n",mode,win>>10,(c1-c0)*1e6/(bytes/(double)mib),(w1-w0)*1e6/(bytes/(double)mib));
  return 0; }
