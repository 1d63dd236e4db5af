// xlctl: the command-line client of xl-scheduler. Everything lives in
// xl_client_lib (client/cli.h); this file only hands it the command line.
#include "client/cli.h"

int main(int argc, char** argv) { return xl::client::XlctlMain(argc, argv); }
