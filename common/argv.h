// Secrets given on a command line (xlctl --token, xl-agent --join-token)
// are readable by every local user in /proc/<pid>/cmdline and ps for as
// long as the process runs. A binary that has parsed its flags overwrites
// their values in place, so they show only for the moment before.
// The environment (XL_TOKEN, XL_JOIN_TOKEN) or a file is still the safer
// way: the help of those flags says so.
#ifndef XL_COMMON_ARGV_H_
#define XL_COMMON_ARGV_H_

#include <initializer_list>

namespace xl {

// Overwrites with 'x' the value of each of `flags` ("--token") in argv,
// given as "--token VALUE" or "--token=VALUE"; keeps every length, so
// argv's layout is unchanged. Returns how many values it overwrote.
// Call it after the flags are parsed into copies.
int HideArgumentValues(int argc, char** argv,
                       std::initializer_list<const char*> flags);

}  // namespace xl

#endif  // XL_COMMON_ARGV_H_
