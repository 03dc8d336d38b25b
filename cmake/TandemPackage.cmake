# The Debian package: `cpack -G DEB` in the build directory makes tandem_<version>_<arch>.deb
# with what cmake/TandemInstall.cmake installs, under /usr (docs/install.md). Its maintainer
# scripts (deploy/debian) make the system group `tandem` that owns tandemd's socket and
# enable the systemd unit; purging removes the group again.
set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "tandem")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU sharing for ML training and inference through CUDA driver interposition")
set(CPACK_PACKAGE_DESCRIPTION "libtandem.so, preloaded into unmodified CUDA programs, gates their kernel
launches and serves their GPU memory; tandemd, the node daemon, fills training's idle gaps
with inference, keeps online inference within its latency target and moves pooled memory
between processes; tandemctl shows and adjusts it.")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES OFF)  # tandemd's crash backtraces want the symbols
set(CPACK_GENERATOR DEB)

set(CPACK_DEBIAN_PACKAGE_MAINTAINER "tandem maintainers <tandem@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Library dependencies from the binaries (dpkg-shlibdeps: libc6, libunwind, libstdc++ for the
# two executables); passwd for groupadd/groupdel in the maintainer scripts.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "passwd")
# The configuration is a conffile: an operator's edits survive upgrades, a purge removes it.
file(WRITE ${PROJECT_BINARY_DIR}/packaging/conffiles "/etc/tandem/tandemd.json\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/packaging/conffiles
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
