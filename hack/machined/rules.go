package main

import (
	"github.com/siderolabs/talos/pkg/grpc/middleware/auth/unix"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// rules and allowedServices are copied verbatim from Talos v1.14.1's
// internal/app/machined/pkg/system/services/machined.go (internal, so not
// importable). TestRulesMatchTalos compares them with that file in the
// module cache, so an upgrade that changes them fails loudly.
var rules = map[string]role.Set{
	"/cluster.ClusterService/HealthCheck": role.MakeSet(role.Admin, role.Operator, role.Reader),

	"/inspect.InspectService/ControllerRuntimeDependencies": role.MakeSet(role.Admin, role.Operator, role.Reader),

	"/machine.ImageService/Import": role.MakeSet(role.Admin),
	"/machine.ImageService/List":   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.ImageService/Pull":   role.MakeSet(role.Admin, role.Operator),
	"/machine.ImageService/Remove": role.MakeSet(role.Admin),
	"/machine.ImageService/Verify": role.MakeSet(role.Admin, role.Operator, role.Reader, role.ImageVerifier),

	"/machine.DebugService/ContainerRun": role.MakeSet(role.Admin),

	"/machine.LifecycleService/Install": role.MakeSet(role.Admin),
	"/machine.LifecycleService/Upgrade": role.MakeSet(role.Admin),

	"/machine.MachineService/ApplyConfiguration": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),
	"/machine.MachineService/Bootstrap":                   role.MakeSet(role.Admin),
	"/machine.MachineService/CPUInfo":                     role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/CPUFreqStats":                role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Containers":                  role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Copy":                        role.MakeSet(role.Admin),
	"/machine.MachineService/DiskStats":                   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/DiskUsage":                   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Dmesg":                       role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/EtcdAlarmList":               role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/EtcdAlarmDisarm":             role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/EtcdDefragment":              role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/EtcdForfeitLeadership":       role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdLeaveCluster":            role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdMemberList":              role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/EtcdRecover":                 role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdRemoveMemberByID":        role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdSnapshot":                role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":                  role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/EtcdDowngradeCancel":         role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdDowngradeEnable":         role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdDowngradeValidate":       role.MakeSet(role.Admin),
	"/machine.MachineService/Events":                      role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/GenerateClientConfiguration": role.MakeSet(role.Admin),
	"/machine.MachineService/Hostname":                    role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/ImageList":                   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/ImagePull":                   role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Kubeconfig":                  role.MakeSet(role.Admin),
	"/machine.MachineService/List":                        role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/LoadAvg":                     role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Logs":                        role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/LogsContainers":              role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Memory":                      role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/MetaWrite":                   role.MakeSet(role.Admin, role.MetaWriter),
	"/machine.MachineService/MetaDelete":                  role.MakeSet(role.Admin, role.MetaWriter),
	"/machine.MachineService/Mounts":                      role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/NetworkDeviceStats":          role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Netstat":                     role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/PacketCapture":               role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Processes":                   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Read":                        role.MakeSet(role.Admin),
	"/machine.MachineService/Reboot":                      role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Reset":                       role.MakeSet(role.Admin),
	"/machine.MachineService/Restart":                     role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Rollback":                    role.MakeSet(role.Admin),
	"/machine.MachineService/ServiceList":                 role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/ServiceRestart":              role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ServiceStart":                role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ServiceStop":                 role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Shutdown":                    role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Stats":                       role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/SystemStat":                  role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Upgrade":                     role.MakeSet(role.Admin),
	"/machine.MachineService/Version":                     role.MakeSet(role.Admin, role.Operator, role.Reader),

	// per-type authorization is handled by the service itself
	"/cosi.resource.State/Create":             role.MakeSet(role.Admin),
	"/cosi.resource.State/Destroy":            role.MakeSet(role.Admin),
	"/cosi.resource.State/Teardown":           role.MakeSet(role.Admin),
	"/cosi.resource.State/TeardownAndDestroy": role.MakeSet(role.Admin),
	"/cosi.resource.State/Get":                role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/List":               role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/Update":             role.MakeSet(role.Admin),
	"/cosi.resource.State/Watch":              role.MakeSet(role.Admin, role.Operator, role.Reader),

	"/storage.StorageService/Disks": role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/storage.StorageService/BlockDeviceWipe": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),
	"/machine.LVMService/LogicalVolumeRemove": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),
	"/machine.LVMService/VolumeGroupRemove": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),
	"/machine.LVMService/PhysicalVolumeRemove": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),
	"/machine.MDService/Destroy": role.MakeSet(
		role.Admin,
		// for maintenance only, verified in the handler
		role.Reader,
	),

	"/time.TimeService/Time":      role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/time.TimeService/TimeCheck": role.MakeSet(role.Admin, role.Operator, role.Reader),
}

var allowedServices = []unix.AllowedService{
	{
		// normal network API access
		Pattern:      "apid",
		AllowedRoles: role.All,
	},
	{
		// image verification
		Pattern:      "containerd",
		AllowedRoles: role.MakeSet(role.ImageVerifier),
	},
	{
		// image verification
		Pattern:      "cri",
		AllowedRoles: role.MakeSet(role.ImageVerifier),
	},
	{
		// internal dashboard
		Pattern:      "dashboard",
		AllowedRoles: role.MakeSet(role.Reader, role.MetaWriter),
	},
	{
		// installer access during installation/upgrade
		Pattern:      "installer",
		AllowedRoles: role.All,
	},
	{
		// health checks
		Pattern:      "machined",
		AllowedRoles: role.Zero,
	},
	{
		// extension services
		Pattern:      "ext-*",
		AllowedRoles: role.All,
		// allow processes forked inside the container to access apid as well
		AllowNamespaceMatch: true,
	},
	{
		// containers with security.machinedAccess enabled.
		Pattern:      constants.ContainerServicePIDPrefix + "*",
		AllowedRoles: role.All,
		// allow processes forked inside the container to access machined as well
		AllowNamespaceMatch: true,
	},
}
