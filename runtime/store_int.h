/*
 * store_int.h - what the rendezvous store's server (store.c) and client
 * (store_client.c) agree on, and no other part of the runtime: store.h is
 * their public face.  The two files do not call each other.
 *
 * Frames, both ways: u32 length of what follows (little-endian), u32
 * sequence number, then for a request u8 command, u16 key length, key,
 * value; for a reply u8 status (0 ok) and the value.  A reply carries the
 * number of its request, so that a client whose GET timed out discards
 * the late answer instead of taking it for the next one's.
 */
#ifndef DRI_STORE_INT_H
#define DRI_STORE_INT_H

#include <stddef.h>

enum { CMD_SET = 1, CMD_GET = 2, CMD_ADD = 3 };
enum { ST_OK = 0, ST_NOMEM = 1, ST_LIMIT = 2 };

#define KEY_MAX 1023
#define VALUE_MAX ((size_t)64 << 20)            /* one value */

#endif
