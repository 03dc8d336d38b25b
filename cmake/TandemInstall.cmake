# Where `cmake --install` puts tandem (GNUInstallDirs), for a distribution package or a
# prefix of one's own; docs/install.md lists the layout. The simulated driver, the examples,
# the fixtures and the tests are never installed.
#
# Paths that depend on the prefix chosen at install time (`cmake --install --prefix`, CPack's
# /usr) are computed then, not at configure time: the systemd unit names the installed
# tandemd, and a /usr install puts its configuration under /etc as distributions do.
include(GNUInstallDirs)

# The preload library sits in a directory of its own, not on the linker's search path:
# nothing links against it, and /etc/ld.so.preload or LD_PRELOAD name it by full path.
set(TANDEM_INSTALL_PRELOADDIR "${CMAKE_INSTALL_LIBDIR}/tandem" CACHE STRING
    "Directory of libtandem.so, relative to the prefix")

install(TARGETS tandem LIBRARY DESTINATION ${TANDEM_INSTALL_PRELOADDIR} COMPONENT runtime)
install(TARGETS tandemd RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT runtime)
install(TARGETS tandemctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# The Kubernetes device plugin (docs/kubernetes.md), where gRPC was found to build it.
if(TARGET tandem-device-plugin)
  install(TARGETS tandem-device-plugin RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT runtime)
endif()
# The client API (request markers, memory-pressure callback) for servers that call it.
install(FILES include/tandem/client.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem COMPONENT runtime)
# PyTorch's side of memory quotas (the cache emptied; micro-batches that give memory back):
# importable from here (PYTHONPATH) or copied into an image. Beside them SIRIUS's inference side:
# the model server and the queueing model that chooses its T_idle and tandemd's W.
install(FILES examples/pytorch/tandem_torch.py examples/pytorch/tandem_microbatch.py
  examples/pytorch/model_server.py examples/pytorch/sirius_model.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/tandem/python COMPONENT runtime)
install(FILES README.md LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT runtime FILES_MATCHING PATTERN "*.md")

# The systemd unit and the daemon's configuration, written with the install-time prefix.
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  if(prefix STREQUAL \"/usr\")
    set(TANDEM_SYSCONFDIR /etc)
  else()
    set(TANDEM_SYSCONFDIR \"\${prefix}/etc\")
  endif()
  set(TANDEM_SBINDIR \"\${prefix}/${CMAKE_INSTALL_SBINDIR}\")
  # One staging directory per prefix and DESTDIR: installs and cpack may run side by side.
  string(MD5 staging \"\${prefix}|\$ENV{DESTDIR}\")
  set(staging \"${PROJECT_BINARY_DIR}/install-time/\${staging}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/systemd/tandemd.service.in\" \"\${staging}/tandemd.service\" @ONLY)
  file(INSTALL \"\${staging}/tandemd.service\" DESTINATION \"\${prefix}/lib/systemd/system\")
  file(REMOVE_RECURSE \"\${staging}\")
  file(INSTALL \"${PROJECT_SOURCE_DIR}/deploy/tandemd.json\" DESTINATION \"\${TANDEM_SYSCONFDIR}/tandem\")
" COMPONENT runtime)
