/* The Open MPI baseline of allreduce_bench.py: MPI_Allreduce of float sums
 * from 4 KiB to 256 MiB; prints "bytes seconds_per_op" lines on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long max_bytes = argc > 1 ? atol(argv[1]) : (256L << 20);
  float* buf = malloc(max_bytes);
  for (long i = 0; i < max_bytes / 4; ++i) buf[i] = 1.0f;
  for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    long n = bytes / 4;
    // About 1 GiB moved per size (at least 4 and at most 2000 operations),
    // so every size is timed over a similar stretch; same as the other side.
    int iters = (int)((1L << 30) / bytes);
    iters = iters < 4 ? 4 : (iters > 2000 ? 2000 : iters);
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) / iters;
    double worst;
    MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%ld %.9f\n", bytes, worst);
    fflush(stdout);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
