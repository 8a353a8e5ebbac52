# IO plant of stage 02 (CPU): chunks of 8 keys instead of 128. Each chunk re-reads all of Q and
# writes and reads its block of scores again, so the traffic grows with the number of chunks,
# while the online softmax keeps o and lse right for any chunk length.
sed -i 's|^#define CHUNKED_DEFAULT_CHUNK 128$|#define CHUNKED_DEFAULT_CHUNK 8|' chunked.c
